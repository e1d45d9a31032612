//! Quarry's compute process: SQL in, Arrow out, with the heavy lifting
//! pushed into the storage processes.
//!
//! LIFE OF A QUERY
//!
//! 1. A client sends SQL over Arrow Flight SQL ([`flight`]), or a typed
//!    aggregation request from the client library (the same
//!    `quarry.compute.Query` message the SQL front end produces).
//! 2. [`sql::parse`] turns SQL into a [`sql::Statement`]; constant dates
//!    and intervals fold into literals.
//! 3. [`engine::QueryEngine`] looks the table up in the meta region and
//!    [`plan::plan_query`] binds names and types, and splits the work: the
//!    regions get scan + selection + partial aggregation (or projection and
//!    limit); compute keeps the final aggregation, HAVING, ORDER BY, LIMIT.
//! 4. [`region_cache::RegionCache`] maps the table's key range to regions
//!    and the stores leading them.
//! 5. [`dispatch::Dispatcher`] sends one coprocessor request per region,
//!    many in flight, each retried on its own by the one region-retry layer
//!    ([`dispatch::retry`], which INSERT's writer shares: backoff 2 ms →
//!    500 ms with jitter; NotLeader → retry at the hint; EpochNotMatch →
//!    install the new regions and re-split only that piece).
//! 6. Each region answers with Arrow IPC chunks, page by page; each page
//!    reaches [`exec::run_plan`] as it arrives, which merges it
//!    column-wise (the final aggregator's `merge_batch`), never decoding a
//!    row, and can stop the query once a LIMIT is met.
//! 7. [`exec::finish`] applies HAVING, ORDER BY, OFFSET/LIMIT and the output
//!    expressions; [`flight`] streams the record batches back.
//!
//! DDL and INSERT go through the same engine: CREATE TABLE asks the meta
//! region to create pre-split regions, INSERT encodes rows and writes them
//! region by region ([`insert`], [`kv_writer`]).
//!
//! IMPLEMENTATION CAVEATS
//!
//! * Single-table queries only: no joins, subqueries or window functions.
//! * Results of queries without aggregation are collected on compute
//!   before they are sent (ORDER BY needs them all; LIMIT without ORDER BY
//!   stops early).
//! * A store that is down costs the regions it led an election (about
//!   1–2 s): requests go to other replicas meanwhile. A region with no
//!   reachable leader for 10 s (a majority of its stores down) fails the
//!   query with an unavailable error naming the stores tried.

// Library and binary code handles failures; tests may unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod cluster;
pub mod config;
pub mod dispatch;
pub mod engine;
mod error;
pub mod exec;
pub mod flight;
pub mod insert;
pub mod kv_writer;
pub mod plan;
pub mod region_cache;
pub mod server;
pub mod sql;

pub use error::{status_detail, Error, Result};
