//! Bulk load by SST ingest: the store's side (TiDB Lightning's local
//! backend, TiKV's `sst_importer`).
//!
//! A bulk loader does the work of the write path itself: it sorts one
//! region's pairs, encodes them into a RocksDB SST file, uploads the file
//! to the store of every replica of the region ([`SstImporter::upload`],
//! the `UploadSst` RPC), and then asks the region's leader to propose an
//! `IngestSst` raft command. Each replica applies that command by handing
//! its own copy of the file to RocksDB (`ingest_external_file`), which
//! links it into the LSM tree whole: no raft log copy of the data, no
//! write-ahead log, no memtable, and for a fresh key range no compaction
//! either, since the file lands in the bottom level.
//!
//! THE FILE'S LIFE on a store:
//! 1. Upload writes `<uuid>.sst.tmp` in the import directory, checks its
//!    length and CRC-32 against the loader's [`SstMeta`], syncs it and
//!    renames it to `<uuid>.sst`. A file that is there is whole.
//! 2. Apply (`apply.rs`) checks that the region's epoch is still the one
//!    the loader uploaded for: a split or a peer change since refuses the
//!    command on every replica alike (a new peer never received the file),
//!    and the loader uploads again for the region as it is now. Apply then
//!    writes everything the round applied before it (so the ingested data
//!    lands after earlier commands, as the log orders them), ingests a hard
//!    link of the file (RocksDB consumes the link) and records the uuid as
//!    ingested in the store's local column family, in the same write batch
//!    as the apply state.
//! 3. Once that batch is durable, the store deletes the file
//!    ([`SstImporter::delete`]). Until then a crash replays the command
//!    from the log and the file is still there to ingest again (the same
//!    pairs again: harmless).
//!
//! An ingest of a uuid already recorded does nothing and succeeds, so a
//! loader may retry an ingest whose outcome it did not hear. A file that is
//! missing when an ingest with the current epoch applies cannot be
//! explained by anything the log says; like a failed disk read it stops
//! the store rather than let this replica silently differ from the others.
//!
//! CAVEATS: the ingested pairs carry no commit timestamp, as the `BatchPut`
//! path's packs do not: bulk load is for a table no one writes to while it
//! loads (the loaders create it and fill it before anything else can). A
//! file whose loader died between upload and ingest stays until the store
//! next starts and finds it older than [`ORPHAN_AGE`].

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::{Stream, StreamExt};
use quarry_coprocessor::codec::key::hex;
use quarry_proto::kv::SstMeta;
use tokio::io::AsyncWriteExt;

use crate::{Error, Result};

/// The largest SST file a store accepts.
pub const MAX_SST_BYTES: u64 = 1 << 30;

/// Uploaded files never ingested are deleted at start after this long.
pub const ORPHAN_AGE: Duration = Duration::from_secs(24 * 3600);

/// The uuid's length in bytes.
pub const UUID_BYTES: usize = 16;

/// A store's directory of uploaded SST files.
#[derive(Debug)]
pub struct SstImporter {
    dir: PathBuf,
}

impl SstImporter {
    /// Opens (creating) `dir`, removing half-uploaded files and files
    /// older than [`ORPHAN_AGE`].
    pub fn open(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::Engine(format!("cannot create {}: {e}", dir.display())))?;
        let entries = std::fs::read_dir(dir)
            .map_err(|e| Error::Engine(format!("cannot list {}: {e}", dir.display())))?;
        for entry in entries.flatten() {
            let path = entry.path();
            let partial = path.extension().is_some_and(|e| e == "tmp");
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > ORPHAN_AGE);
            if partial || old {
                tracing::info!(file = %path.display(), "removing an SST file never ingested");
                let _ = std::fs::remove_file(&path);
            }
        }
        Ok(SstImporter {
            dir: dir.to_path_buf(),
        })
    }

    /// Where the file named by `uuid` lives.
    pub fn path(&self, uuid: &[u8]) -> Result<PathBuf> {
        if uuid.len() != UUID_BYTES {
            return Err(Error::InvalidInput(format!(
                "an SST's uuid has {UUID_BYTES} bytes, not {}",
                uuid.len()
            )));
        }
        Ok(self.dir.join(format!("{}.sst", hex(uuid))))
    }

    /// Whether the file named by `uuid` was uploaded (and not yet deleted).
    pub fn exists(&self, uuid: &[u8]) -> Result<bool> {
        Ok(self.path(uuid)?.exists())
    }

    /// Stores the file `meta` describes from `chunks`, whole or not at all.
    pub async fn upload(
        &self,
        meta: &SstMeta,
        mut chunks: impl Stream<Item = Result<bytes::Bytes>> + Unpin,
    ) -> Result<()> {
        let path = self.path(&meta.uuid)?;
        if meta.length > MAX_SST_BYTES {
            return Err(Error::InvalidInput(format!(
                "an SST of {} bytes is over the limit of {MAX_SST_BYTES}",
                meta.length
            )));
        }
        let tmp = path.with_extension("sst.tmp");
        let io =
            |what: &str, e: std::io::Error| Error::Engine(format!("{what} {}: {e}", tmp.display()));
        let result = async {
            let mut file = tokio::fs::File::create(&tmp)
                .await
                .map_err(|e| io("cannot create", e))?;
            let mut crc = crc32fast::Hasher::new();
            let mut len = 0u64;
            while let Some(chunk) = chunks.next().await {
                let chunk = chunk?;
                len += chunk.len() as u64;
                if len > meta.length {
                    return Err(Error::InvalidInput(format!(
                        "the SST upload sent more than the {} bytes it announced",
                        meta.length
                    )));
                }
                crc.update(&chunk);
                file.write_all(&chunk)
                    .await
                    .map_err(|e| io("cannot write", e))?;
            }
            if len != meta.length {
                return Err(Error::InvalidInput(format!(
                    "the SST upload ended after {len} of {} bytes",
                    meta.length
                )));
            }
            let sum = crc.finalize();
            if sum != meta.crc32 {
                return Err(Error::InvalidInput(format!(
                    "the SST upload's CRC-32 is {sum:08x}, not the {:08x} announced",
                    meta.crc32
                )));
            }
            file.sync_all().await.map_err(|e| io("cannot sync", e))?;
            tokio::fs::rename(&tmp, &path)
                .await
                .map_err(|e| io("cannot rename", e))
        }
        .await;
        if result.is_err() {
            let _ = tokio::fs::remove_file(&tmp).await;
        }
        result
    }

    /// Removes an ingested file (it is in RocksDB now).
    pub fn delete(&self, path: &Path) {
        if let Err(e) = std::fs::remove_file(path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(file = %path.display(), "cannot remove an ingested SST: {e}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(data: &[u8]) -> SstMeta {
        SstMeta {
            uuid: vec![7; UUID_BYTES],
            length: data.len() as u64,
            crc32: crc32fast::hash(data),
            ..Default::default()
        }
    }

    fn chunks(parts: &[&'static [u8]]) -> impl Stream<Item = Result<bytes::Bytes>> + Unpin {
        futures::stream::iter(
            parts
                .iter()
                .map(|p| Ok(bytes::Bytes::from_static(p)))
                .collect::<Vec<_>>(),
        )
    }

    #[tokio::test]
    async fn an_upload_is_kept_only_when_whole_and_intact() {
        let dir = tempfile::tempdir().unwrap();
        let imp = SstImporter::open(dir.path()).unwrap();
        let m = meta(b"hello world");
        imp.upload(&m, chunks(&[b"hello ", b"world"]))
            .await
            .unwrap();
        assert!(imp.exists(&m.uuid).unwrap());
        assert_eq!(
            std::fs::read(imp.path(&m.uuid).unwrap()).unwrap(),
            b"hello world"
        );

        // Short, long and corrupt uploads leave nothing behind.
        let mut other = meta(b"hello world");
        other.uuid = vec![8; UUID_BYTES];
        for (parts, want) in [
            (&[&b"hello"[..]][..], "ended after 5 of 11 bytes"),
            (&[&b"hello world!"[..]][..], "more than the 11 bytes"),
            (&[&b"hello World"[..]][..], "CRC-32"),
        ] {
            let err = imp.upload(&other, chunks(parts)).await.unwrap_err();
            assert!(err.to_string().contains(want), "{err}");
            assert!(!imp.exists(&other.uuid).unwrap());
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);

        // A uuid that could name another path is refused.
        let mut bad = meta(b"x");
        bad.uuid = b"../../etc".to_vec();
        let err = imp.upload(&bad, chunks(&[b"x"])).await.unwrap_err();
        assert!(err.to_string().contains("16 bytes"), "{err}");
    }

    #[test]
    fn opening_removes_half_uploaded_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ab.sst.tmp"), b"x").unwrap();
        std::fs::write(dir.path().join("ab.sst"), b"x").unwrap();
        SstImporter::open(dir.path()).unwrap();
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(left, vec!["ab.sst".to_string()]);
    }
}
