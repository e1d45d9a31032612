//! The `quarry` binary's library half: TPC-H data and answers, the bulk
//! loaders (TPC-H, Parquet and CSV files), the local multi-process cluster, the benches (TPC-H, writes,
//! the bank workload, YCSB), result printing, and a secure cluster's
//! certificates and first user, and the sqllogictest runner.
//! `src/main.rs` is the command line over these.

// Library and binary code handles failures; tests may unwrap.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod answers;
pub mod backup;
pub mod bank;
pub mod bench;
pub mod chaos;
pub mod console;
pub mod load;
pub mod load_file;
pub mod local;
pub mod netns;
pub mod output;
pub mod script;
pub mod secure;
pub mod shell;
pub mod slt;
pub mod status;
pub mod status_server;
pub mod tpch;
pub mod ycsb;
