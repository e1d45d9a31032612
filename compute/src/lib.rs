//! Quarry's compute process: SQL in, Arrow out, with the heavy lifting
//! pushed into the storage processes.
//!
//! LIFE OF A QUERY
//!
//! 1. A client sends SQL over Arrow Flight SQL ([`flight`]) or PostgreSQL's
//!    wire protocol ([`pg`], the same engine calls); the client
//!    library's typed requests arrive as the SQL they render.
//! 2. Queries (SELECT, WITH, EXPLAIN) go to DataFusion ([`df`]): each
//!    autocommit query plans over the catalog this process keeps, checked
//!    against its snapshot's catalog version (`catalog_cache.rs`; writes,
//!    DDL and statements in transactions read the meta region's table
//!    list per statement), and DataFusion
//!    parses, binds, decorrelates subqueries, orders joins and plans.
//! 3. Each Quarry table is a [`df::table::QuarryTable`]: the filters the
//!    coprocessor can evaluate, the projection and any limit become one
//!    coprocessor DAG in a [`df::region_scan::RegionScanExec`], the leaf of
//!    the physical plan. Quarry's physical rule ([`df::rules`]) moves a
//!    Partial aggregation above a region scan into the DAG, so the regions
//!    ship partial states that DataFusion's Final stage merges
//!    column-wise, never decoding a row.
//! 4. [`region_cache::RegionCache`] maps the table's key range to regions
//!    and the stores leading them.
//! 5. [`dispatch::Dispatcher`] asks each store for its regions in one
//!    batched call, then each region on its own: many in flight, each
//!    retried alone by the one region-retry layer
//!    ([`retry`], which INSERT's writer shares: backoff 2 ms →
//!    500 ms with jitter; NotLeader → retry at the hint; EpochNotMatch →
//!    install the new regions and re-split only that piece).
//! 6. Each region answers with Arrow IPC chunks, page by page, streamed
//!    into DataFusion as they arrive; joins, final aggregation, sorts and
//!    whatever storage could not evaluate run there, and [`flight`] streams
//!    the record batches back.
//!
//! DDL, INSERT, UPDATE, DELETE, SHOW TABLES and DESCRIBE go through
//! Quarry's own path ([`sql`]): CREATE TABLE asks the meta region to create
//! pre-split regions; ALTER TABLE ([`engine::alter`]) and views
//! ([`df::views`]) change the catalog only; INSERT encodes rows
//! ([`engine::insert`]), INSERT … SELECT and UPDATE/DELETE find theirs
//! with a snapshot query ([`engine::dml`]), and each statement's rows are
//! written as one transaction ([`txn`]).
//!
//! LAYERS
//!
//! Front ends → session and engine → planner → execution → transactions
//! → region access, with leaves (errors, metrics, configuration, the
//! caller and the deadline of the request being served) that all may use:
//! each module imports only its own layer and those below, without
//! cycles. `layers.rs` has the table and the test that keeps it.
//!
//! IMPLEMENTATION CAVEATS
//!
//! * An autocommit query plans over a kept catalog, checked by the
//!   catalog version its snapshot timestamp carries (`catalog_cache.rs`);
//!   other statements read the table list from meta (one call). A Flight
//!   query's plan waits in memory from GetFlightInfo to its DoGet (any
//!   other compute process plans the ticket's SQL again), and a statement
//!   (or a query shape, its constants taken out: `df/literal_shape.rs`)
//!   seen before against the same tables takes its plans from the plan
//!   cache (`df/plan_cache.rs`): caches, which no answer depends on.
//! * A store that is down costs the regions it led an election (about
//!   1–2 s): requests go to other replicas meanwhile. A region with no
//!   reachable leader for 10 s (a majority of its stores down) fails the
//!   query with an unavailable error naming the stores tried.

// Library and binary code handles failures; tests may unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod activity;
pub mod auth;
pub mod backoff;
pub mod caller;
pub mod catalog_cache;
pub mod cluster;
pub mod config;
pub mod df;
pub mod dispatch;
pub mod engine;
mod error;
pub mod flight;
pub mod gc_hold;
pub mod handle_order;
pub mod index;
pub mod kv_writer;
mod layers;
pub mod metrics;
pub mod output;
pub mod params;
pub mod pg;
pub mod region_cache;
pub mod retry;
pub mod schema_check;
pub mod server;
pub mod session;
pub mod session_settings;
pub mod sql;
pub mod sst_ingest;
pub mod statement_deadline;
pub mod table_stats;
pub mod tso;
pub mod txn;

/// The DataFusion this crate plans with, for callers that build or inspect
/// its plans (the benches).
pub use datafusion;
pub use error::{status_detail, Error, Result};
