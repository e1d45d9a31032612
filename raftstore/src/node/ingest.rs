//! The bulk loader's calls on a store: keeping an uploaded SST file and
//! proposing its ingest (`crate::import` has the design).

use std::sync::Arc;

use quarry_coprocessor::codec::key::hex;
use quarry_proto::kv::{Context, SstMeta};
use quarry_proto::raft::IngestSst;

use super::{Node, WRITE_TIMEOUT};
use crate::engine::{Cf, Engine};
use crate::import::SstImporter;
use crate::store::StoreMsg;
use crate::{keys, Error, Result};

impl<E: Engine> Node<E> {
    /// Where this store keeps uploaded SST files.
    pub fn set_importer(&self, importer: Arc<SstImporter>) {
        let _ = self.importer.set(importer);
    }

    fn importer(&self) -> Result<&Arc<SstImporter>> {
        self.importer.get().ok_or_else(|| {
            Error::InvalidInput(format!("store {} does not take SST files", self.store_id))
        })
    }

    /// Stores an uploaded SST file (`import.rs`).
    pub async fn upload_sst(
        &self,
        meta: &SstMeta,
        chunks: impl futures::Stream<Item = Result<bytes::Bytes>> + Unpin,
    ) -> Result<()> {
        let r = self.importer()?.upload(meta, chunks).await;
        crate::metrics::SST_UPLOADS
            .with_label_values(&[if r.is_ok() { "ok" } else { "error" }])
            .inc();
        if r.is_ok() {
            crate::metrics::SST_UPLOAD_BYTES.inc_by(meta.length);
        }
        r
    }

    /// Has every replica of the region ingest its copy of `sst`; answers
    /// once applied here (the leader). A file this store never received is
    /// refused before anything is proposed.
    pub async fn ingest(&self, ctx: Option<&Context>, sst: SstMeta) -> Result<()> {
        let ctx = *Self::context(ctx)?;
        let region_id = ctx.region_id;
        let importer = self.importer()?;
        let done = self
            .engine
            .get(Cf::Raft, &keys::ingested_key(region_id, &sst.uuid))?
            .is_some();
        if !done && !importer.exists(&sst.uuid)? {
            return Err(Error::InvalidInput(format!(
                "no SST {} was uploaded to store {}",
                hex(&sst.uuid),
                self.store_id
            )));
        }
        self.ask(
            || format!("ingesting an SST into region {region_id}"),
            WRITE_TIMEOUT,
            |cb| StoreMsg::Ingest {
                region_id,
                epoch: ctx.region_epoch,
                ingest: IngestSst { sst: Some(sst) },
                cb,
            },
        )
        .await
    }
}
