//! Bulk load by SST ingest: the loader's side (TiDB Lightning's local
//! backend; the store's side is raftstore's `import.rs`).
//!
//! [`SstIngester::ingest`] takes a batch of pairs, sorts it, and cuts it
//! along the regions that hold it. For each region it builds one SST file
//! (with the [`SstBuilder`] it was given: compute does not link RocksDB),
//! uploads the file to the store of every replica, and asks the leader to
//! have all replicas ingest it through one raft command. Compared with
//! `BatchPut` ([`crate::kv_writer`]), the data never enters the raft log,
//! the write-ahead log or a memtable, and is compacted by no one.
//!
//! Retries ride on the shared layer (`retry.rs`), like every
//! other region request: NotLeader moves to the new leader (the file is on
//! every replica already), EpochNotMatch re-cuts the batch over the
//! regions as they are now and uploads again (a split moved part of the
//! range, or a peer changed and lacks the file). A replica's store that
//! cannot take the upload makes the region busy: it is retried with
//! backoff until the deadline, and then the caller may write the batch
//! through `BatchPut` instead (the loaders do).
//!
//! An ingest whose answer was lost is safe to repeat: a store that already
//! ingested a file's uuid does nothing the second time.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use parking_lot::Mutex;
use quarry_coprocessor::storage::KeyRange;
use quarry_proto::kv::{key_error, IngestRequest, KvPair, SstMeta, UploadSstRequest};
use quarry_proto::meta::RegionEpoch;

use crate::cluster::{Cluster, Routes};
use crate::region_cache::{cut_sorted, span_of, Located, RegionCache};
use crate::retry::{Attempt, RegionWork, Retry, RetryConfig, RetryStats};
use crate::{Error, Result};

/// Encodes sorted pairs (keys strictly increasing) as the bytes of an SST
/// file the stores can ingest.
pub type SstBuilder = Arc<dyn Fn(&[KvPair]) -> Result<Vec<u8>> + Send + Sync>;

/// Bytes per upload message.
const CHUNK_BYTES: usize = 1 << 20;

/// Regions ingesting at once for one batch.
const INGEST_CONCURRENCY: usize = 4;

pub struct SstIngester {
    shared: Arc<Shared>,
    cache: Arc<RegionCache>,
    retry: RetryConfig,
}

/// What every region piece of a batch uses.
struct Shared {
    cluster: Arc<Cluster>,
    build: SstBuilder,
    /// Store addresses by id, refreshed from meta on a miss.
    stores: Mutex<HashMap<u64, String>>,
    /// Why the first failed upload failed, for the error if the batch
    /// gives up (later attempts, short of time, fail by timing out).
    first_problem: Mutex<Option<String>>,
}

impl Shared {
    async fn store_addr(&self, id: u64) -> Result<String> {
        if let Some(a) = self.stores.lock().get(&id) {
            return Ok(a.clone());
        }
        let stores = self.cluster.get_stores().await?;
        let mut book = self.stores.lock();
        for s in stores {
            book.insert(s.id, s.addr);
        }
        book.get(&id)
            .cloned()
            .ok_or_else(|| Error::Unavailable(format!("meta knows no store {id}")))
    }

    /// Uploads `data` as the file `meta` describes to store `store_id`.
    async fn upload(
        &self,
        store_id: u64,
        meta: &SstMeta,
        data: &bytes::Bytes,
        timeout: Duration,
    ) -> std::result::Result<(), String> {
        let addr = self.store_addr(store_id).await.map_err(|e| e.to_string())?;
        let mut client = self.cluster.kv(&addr).map_err(|e| e.to_string())?;
        let mut msgs = vec![UploadSstRequest {
            meta: Some(meta.clone()),
            data: bytes::Bytes::new(),
        }];
        // Slices of one buffer: no copy per store.
        msgs.extend(
            (0..data.len())
                .step_by(CHUNK_BYTES)
                .map(|at| UploadSstRequest {
                    meta: None,
                    data: data.slice(at..(at + CHUNK_BYTES).min(data.len())),
                }),
        );
        let call = client.upload_sst(futures::stream::iter(msgs));
        match tokio::time::timeout(timeout, call).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(st)) => Err(format!(
                "store {store_id} at {addr}: {}",
                crate::status_detail(&st)
            )),
            Err(_) => Err(format!("store {store_id} at {addr}: no answer in time")),
        }
    }
}

/// One region's share of a batch, and the file uploaded for it.
struct IngestWork {
    pairs: Vec<KvPair>,
    shared: Arc<Shared>,
    /// The file uploaded to every replica of (region id, epoch).
    uploaded: Option<(u64, RegionEpoch, SstMeta)>,
}

impl IngestWork {
    /// Builds and uploads this piece's file for `region`'s replicas.
    async fn prepare(
        &mut self,
        region: &Located,
        timeout: Duration,
    ) -> Result<std::result::Result<SstMeta, String>> {
        let epoch = region.region.epoch.unwrap_or_default();
        if let Some((id, e, meta)) = &self.uploaded {
            if *id == region.region.id && *e == epoch {
                return Ok(Ok(meta.clone()));
            }
        }
        let (Some(first), Some(last)) = (self.pairs.first(), self.pairs.last()) else {
            return Err(Error::Internal("an empty SST piece".into()));
        };
        let (first_key, last_key) = (first.key.clone(), last.key.clone());
        let pairs = std::mem::take(&mut self.pairs);
        let build = self.shared.build.clone();
        let (pairs, data) = tokio::task::spawn_blocking(move || {
            let data = build(&pairs);
            (pairs, data)
        })
        .await
        .map_err(|e| Error::Internal(format!("building an SST: {e}")))?;
        self.pairs = pairs;
        let data = bytes::Bytes::from(data?);
        let meta = SstMeta {
            uuid: fastrand::u128(..).to_be_bytes().to_vec(),
            region_id: region.region.id,
            region_epoch: Some(epoch),
            first_key,
            last_key,
            length: data.len() as u64,
            crc32: crc32fast::hash(&data),
        };
        let uploads = region
            .region
            .peers
            .iter()
            .map(|p| self.shared.upload(p.store_id, &meta, &data, timeout));
        let failed: Vec<String> = futures::future::join_all(uploads)
            .await
            .into_iter()
            .filter_map(|r| r.err())
            .collect();
        if !failed.is_empty() {
            let why = format!(
                "uploading an SST for region {}: {}",
                region.region.id,
                failed.join("; ")
            );
            self.shared
                .first_problem
                .lock()
                .get_or_insert_with(|| why.clone());
            return Ok(Err(why));
        }
        self.uploaded = Some((region.region.id, epoch, meta.clone()));
        Ok(Ok(meta))
    }
}

impl RegionWork for IngestWork {
    fn span(&self) -> Option<KeyRange> {
        Some(span_of(&self.pairs.first()?.key, &self.pairs.last()?.key))
    }

    fn split(self, regions: Vec<Located>) -> Result<Vec<(Located, Self)>> {
        let pieces = cut_sorted(self.pairs, regions, |p| &p.key)?;
        Ok(pieces
            .into_iter()
            .map(|(region, pairs)| {
                let work = IngestWork {
                    pairs,
                    shared: self.shared.clone(),
                    uploaded: None,
                };
                (region, work)
            })
            .collect())
    }

    fn send<'a>(
        &'a mut self,
        region: &'a Located,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Attempt>> {
        Box::pin(async move {
            let sst = match self.prepare(region, timeout).await? {
                Ok(meta) => meta,
                Err(why) => return Ok(Attempt::Busy(why)),
            };
            let mut client = self.shared.cluster.kv(&region.addr)?;
            let req = IngestRequest {
                context: Some(region.context()),
                sst: Some(sst),
            };
            let resp = match tokio::time::timeout(timeout, client.ingest(req)).await {
                Ok(Ok(r)) => r.into_inner(),
                Ok(Err(st)) => return Ok(Attempt::Unreachable(st)),
                Err(_) => {
                    return Ok(Attempt::Unreachable(tonic::Status::deadline_exceeded(
                        "no answer to the ingest in time",
                    )))
                }
            };
            if let Some(e) = resp.error {
                return match key_error::Code::try_from(e.code) {
                    // The leader lacks the file (a store lost it?): upload
                    // again.
                    Ok(key_error::Code::InvalidInput) if e.message.contains("no SST") => {
                        self.uploaded = None;
                        Ok(Attempt::Busy(e.message))
                    }
                    Ok(key_error::Code::InvalidInput) => Err(Error::InvalidInput(e.message)),
                    Ok(key_error::Code::Unavailable) => {
                        Ok(Attempt::Busy(format!("ingesting: {}", e.message)))
                    }
                    _ => Err(Error::Internal(e.message)),
                };
            }
            Ok(match resp.region_error {
                Some(re) => Attempt::Region(Box::new(re)),
                None => Attempt::Done,
            })
        })
    }
}

impl SstIngester {
    pub fn new(cluster: Arc<Cluster>, cache: Arc<RegionCache>, build: SstBuilder) -> Self {
        SstIngester {
            shared: Arc::new(Shared {
                cluster,
                build,
                stores: Mutex::new(HashMap::new()),
                first_problem: Mutex::new(None),
            }),
            cache,
            retry: RetryConfig {
                concurrency: INGEST_CONCURRENCY,
                backoff_base: Duration::from_millis(10),
                backoff_max: Duration::from_millis(1000),
                give_up: None,
                what: "ingest",
            },
        }
    }

    /// Adds `pairs` to the regions holding them by SST ingest, overwriting
    /// what is stored under the same keys. Of pairs with the same key one
    /// is kept.
    pub async fn ingest(&self, mut pairs: Vec<KvPair>, timeout: Duration) -> Result<()> {
        pairs.sort_by(|a, b| a.key.cmp(&b.key));
        pairs.dedup_by(|a, b| a.key == b.key);
        let stats = RetryStats::default();
        let retry = Retry {
            cache: &self.cache,
            cfg: &self.retry,
            stats: &stats,
        };
        let work = IngestWork {
            pairs,
            shared: self.shared.clone(),
            uploaded: None,
        };
        retry
            .run(work, Instant::now() + timeout)
            .await
            .map_err(|e| match (e, self.shared.first_problem.lock().take()) {
                (Error::Deadline(m) | Error::Unavailable(m), Some(why)) => {
                    Error::Unavailable(format!("{m}; first: {why}"))
                }
                (e, _) => e,
            })
    }
}
