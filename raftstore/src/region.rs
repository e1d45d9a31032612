//! Region helpers: key containment, epochs, and the region errors a store
//! answers with.

use quarry_coprocessor::codec::key::hex;
use quarry_coprocessor::storage::KeyRangeRef;
use quarry_proto::meta::{
    EpochNotMatch, KeyNotInRegion, Region, RegionEpoch, RegionError, RegionNotFound, ServerIsBusy,
};

/// True if `key` is in `[start_key, end_key)` of `r`.
pub fn contains(r: &Region, key: &[u8]) -> bool {
    KeyRangeRef::of_region(r).contains(key)
}

/// True if `[start, end)` lies inside `r` (an empty `end` means unbounded).
pub fn contains_range(r: &Region, start: &[u8], end: &[u8]) -> bool {
    KeyRangeRef::of_region(r).covers(KeyRangeRef::new(start, end))
}

pub fn epoch(r: &Region) -> RegionEpoch {
    r.epoch.unwrap_or_default()
}

pub fn not_found(region_id: u64) -> RegionError {
    RegionError {
        message: format!("region {region_id} is not on this store"),
        region_not_found: Some(RegionNotFound { region_id }),
        ..Default::default()
    }
}

pub fn epoch_not_match(asked: Option<&RegionEpoch>, current: &Region) -> RegionError {
    let e = epoch(current);
    RegionError {
        message: format!(
            "region {} epoch changed: asked {:?}, now conf_ver {} version {}",
            current.id,
            asked.map(|a| (a.conf_ver, a.version)),
            e.conf_ver,
            e.version
        ),
        epoch_not_match: Some(EpochNotMatch {
            current_regions: vec![current.clone()],
        }),
        ..Default::default()
    }
}

pub fn key_not_in_region(key: &[u8], r: &Region) -> RegionError {
    RegionError {
        message: format!("key {} is not in region {}", hex(key), r.id),
        key_not_in_region: Some(KeyNotInRegion {
            key: key.to_vec(),
            region_id: r.id,
            start_key: r.start_key.clone(),
            end_key: r.end_key.clone(),
        }),
        ..Default::default()
    }
}

pub fn server_is_busy(reason: String) -> RegionError {
    RegionError {
        message: format!("server is busy: {reason}"),
        server_is_busy: Some(ServerIsBusy {
            reason,
            backoff_ms: 10,
        }),
        ..Default::default()
    }
}
