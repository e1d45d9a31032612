//! Encoding a pack: each column into its directory entry and data (the
//! narrowest encoding that holds it), then the value laid out as the
//! format in `mod.rs` describes.

use std::collections::HashMap;

use super::builder::{ColumnBuffer, ColumnBuilder};
use super::{
    ENC_DICT, ENC_F64, ENC_I128, ENC_INT_FOR, ENC_NULL, ENC_PLAIN, ENTRY_LEN, FLAG_NULLS,
    HANDLE_COLUMN_ID, HEADER_LEN, MAX_DICT, VERSION,
};
use crate::{invalid_input, Result};

/// The pack value of `handles` (ascending) and their rows' `columns`.
pub(super) fn pack_value(handles: &[i64], columns: &[ColumnBuilder]) -> Result<Vec<u8>> {
    let rows = handles.len();
    let all_valid = vec![true; rows];
    let mut entries = vec![encode_ints(HANDLE_COLUMN_ID, handles, &all_valid, 0)];
    entries.extend(columns.iter().map(encode_column));
    let data_len: usize = entries.iter().map(|e| e.data.len()).sum();
    let mut out = Vec::with_capacity(HEADER_LEN + entries.len() * ENTRY_LEN + data_len);
    out.push(VERSION);
    out.extend_from_slice(&(rows as u32).to_le_bytes());
    out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
    let mut offset = HEADER_LEN + entries.len() * ENTRY_LEN;
    for e in &entries {
        out.extend_from_slice(&e.id.to_le_bytes());
        out.extend_from_slice(&[e.encoding, e.width, e.flags, 0]);
        out.extend_from_slice(&(offset as u32).to_le_bytes());
        out.extend_from_slice(&(e.data.len() as u32).to_le_bytes());
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&e.min.to_le_bytes());
        out.extend_from_slice(&e.max.to_le_bytes());
        offset += e.data.len();
    }
    if offset > u32::MAX as usize {
        return Err(invalid_input!("a pack exceeds 4 GiB"));
    }
    for e in &entries {
        out.extend_from_slice(&e.data);
    }
    Ok(out)
}

/// Directory entry being written.
struct Entry {
    id: i64,
    encoding: u8,
    width: u8,
    flags: u8,
    data: Vec<u8>,
    min: i64,
    max: i64,
}

fn validity_bitmap(valid: &[bool]) -> Vec<u8> {
    let mut out = vec![0u8; valid.len().div_ceil(8)];
    for (i, v) in valid.iter().enumerate() {
        if *v {
            out[i / 8] |= 1 << (i % 8);
        }
    }
    out
}

fn width_for(range: u64) -> u8 {
    match range {
        0 => 0,
        1..=0xFF => 1,
        0x100..=0xFFFF => 2,
        0x1_0000..=0xFFFF_FFFF => 4,
        _ => 8,
    }
}

fn encode_ints(id: i64, vals: &[i64], valid: &[bool], nulls: usize) -> Entry {
    let (mut min, mut max) = (i64::MAX, i64::MIN);
    for (v, ok) in vals.iter().zip(valid) {
        if *ok {
            min = min.min(*v);
            max = max.max(*v);
        }
    }
    if nulls == vals.len() {
        return null_entry(id);
    }
    let width = width_for(max.wrapping_sub(min) as u64);
    let mut data = Vec::with_capacity(vals.len() * width as usize + vals.len() / 8 + 1);
    let mut flags = 0;
    if nulls > 0 {
        flags |= FLAG_NULLS;
        data.extend_from_slice(&validity_bitmap(valid));
    }
    for (v, ok) in vals.iter().zip(valid) {
        let d = if *ok { v.wrapping_sub(min) as u64 } else { 0 };
        match width {
            0 => {}
            1 => data.push(d as u8),
            2 => data.extend_from_slice(&(d as u16).to_le_bytes()),
            4 => data.extend_from_slice(&(d as u32).to_le_bytes()),
            _ => data.extend_from_slice(&d.to_le_bytes()),
        }
    }
    Entry {
        id,
        encoding: ENC_INT_FOR,
        width,
        flags,
        data,
        min,
        max,
    }
}

fn null_entry(id: i64) -> Entry {
    Entry {
        id,
        encoding: ENC_NULL,
        width: 0,
        flags: 0,
        data: Vec::new(),
        min: 0,
        max: 0,
    }
}

fn encode_column(c: &ColumnBuilder) -> Entry {
    let rows = c.valid.len();
    if c.nulls == rows {
        return null_entry(c.id);
    }
    let mut data = Vec::new();
    let mut flags = 0;
    if c.nulls > 0 {
        flags |= FLAG_NULLS;
        data.extend_from_slice(&validity_bitmap(&c.valid));
    }
    let (encoding, width) = match &c.values {
        ColumnBuffer::Int(v) => return encode_ints(c.id, v, &c.valid, c.nulls),
        ColumnBuffer::F64(v) => {
            for x in v {
                data.extend_from_slice(&x.to_le_bytes());
            }
            (ENC_F64, 8)
        }
        ColumnBuffer::I128(v) => {
            for x in v {
                data.extend_from_slice(&x.to_le_bytes());
            }
            (ENC_I128, 16)
        }
        ColumnBuffer::Bytes {
            offsets,
            data: bytes,
        } => {
            // foldhash, not SipHash: these are our own strings, and the
            // hash was a tenth of a bulk load's pack encoding.
            let mut dict: HashMap<&[u8], u8, _> =
                HashMap::with_hasher(foldhash::fast::RandomState::default());
            let mut entries: Vec<&[u8]> = Vec::new();
            let mut codes = Vec::with_capacity(rows);
            let mut fits = true;
            for (i, ok) in c.valid.iter().enumerate() {
                if !ok {
                    codes.push(0);
                    continue;
                }
                let s = &bytes[offsets[i] as usize..offsets[i + 1] as usize];
                let code = match dict.get(s) {
                    Some(c) => *c,
                    None if entries.len() < MAX_DICT => {
                        let c = entries.len() as u8;
                        dict.insert(s, c);
                        entries.push(s);
                        c
                    }
                    None => {
                        fits = false;
                        break;
                    }
                };
                codes.push(code);
            }
            let dict_bytes: usize = entries.iter().map(|e| e.len()).sum();
            if fits && dict_bytes < bytes.len().max(1) {
                data.extend_from_slice(&(entries.len() as u16).to_le_bytes());
                let mut end = 0u32;
                data.extend_from_slice(&end.to_le_bytes());
                for e in &entries {
                    end += e.len() as u32;
                    data.extend_from_slice(&end.to_le_bytes());
                }
                for e in &entries {
                    data.extend_from_slice(e);
                }
                data.extend_from_slice(&codes);
                (ENC_DICT, 1)
            } else {
                for o in offsets {
                    data.extend_from_slice(&o.to_le_bytes());
                }
                data.extend_from_slice(bytes);
                (ENC_PLAIN, 4)
            }
        }
    };
    Entry {
        id: c.id,
        encoding,
        width,
        flags,
        data,
        min: 0,
        max: 0,
    }
}
