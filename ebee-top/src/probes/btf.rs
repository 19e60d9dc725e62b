//! A small reader of the kernel's BTF (/sys/kernel/btf/vmlinux): just enough to find struct
//! member offsets and tracepoint prototypes, so the programs read `task_struct` fields at the
//! offsets of the running kernel instead of offsets compiled in (aya-ebpf has no CO-RE).
//! The file is untrusted input: every length and offset is checked.

use std::collections::HashMap;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum BtfError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("malformed BTF: {0}")]
    Malformed(&'static str),
    #[error("the kernel's BTF has no {0}")]
    Missing(String),
}

const KIND_INT: u32 = 1;
const KIND_ARRAY: u32 = 3;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
const KIND_TYPEDEF: u32 = 8;
const KIND_FUNC_PROTO: u32 = 13;
const KIND_VAR: u32 = 14;
const KIND_DATASEC: u32 = 15;
const KIND_DECL_TAG: u32 = 17;
const KIND_ENUM64: u32 = 19;
const KIND_PTR: u32 = 2;

#[derive(Clone, Copy, Debug)]
struct Member {
    name_off: u32,
    type_id: u32,
    bit_off: u32,
}

#[derive(Clone, Debug)]
struct Type {
    name_off: u32,
    kind: u32,
    /// `size` or `type`, depending on the kind.
    size_or_type: u32,
    members: Vec<Member>,
    vlen: u32,
}

/// Parsed kernel BTF: types by id, names by string offset.
pub struct Btf {
    types: Vec<Type>,
    strings: Vec<u8>,
    by_name: HashMap<(String, u32), u32>,
    /// Enumerator values by name (32-bit enums only), first definition wins.
    enumerators: HashMap<String, i64>,
}

fn u32_at(b: &[u8], off: usize) -> Result<u32, BtfError> {
    b.get(off..off + 4)
        .and_then(|s| s.try_into().ok())
        .map(u32::from_le_bytes)
        .ok_or(BtfError::Malformed("truncated"))
}

impl Btf {
    /// Read the running kernel's BTF.
    pub fn from_sys_fs() -> Result<Self, BtfError> {
        let path = "/sys/kernel/btf/vmlinux";
        let data = std::fs::read(path).map_err(|source| BtfError::Read {
            path: path.into(),
            source,
        })?;
        Self::parse(&data)
    }

    /// Parse a little-endian BTF blob.
    pub fn parse(data: &[u8]) -> Result<Self, BtfError> {
        if data.len() < 24 || data[0..2] != [0x9f, 0xeb] {
            return Err(BtfError::Malformed("bad magic"));
        }
        let hdr_len = u32_at(data, 4)? as usize;
        let type_off = u32_at(data, 8)? as usize;
        let type_len = u32_at(data, 12)? as usize;
        let str_off = u32_at(data, 16)? as usize;
        let str_len = u32_at(data, 20)? as usize;
        let section = |off: usize, len: usize| {
            hdr_len
                .checked_add(off)
                .and_then(|s| Some((s, s.checked_add(len)?)))
                .and_then(|(s, e)| data.get(s..e))
                .ok_or(BtfError::Malformed("section out of bounds"))
        };
        let tsec = section(type_off, type_len)?;
        let strings = section(str_off, str_len)?.to_vec();

        // Type id 0 is `void`.
        let mut types = vec![Type {
            name_off: 0,
            kind: 0,
            size_or_type: 0,
            members: Vec::new(),
            vlen: 0,
        }];
        let mut p = 0usize;
        let mut enum_raw: Vec<(u32, i64)> = Vec::new();
        while p < tsec.len() {
            let name_off = u32_at(tsec, p)?;
            let info = u32_at(tsec, p + 4)?;
            let size_or_type = u32_at(tsec, p + 8)?;
            p += 12;
            let kind = (info >> 24) & 0x1f;
            let vlen = info & 0xffff;
            let kflag = info >> 31 == 1;
            let mut members = Vec::new();
            let extra = match kind {
                KIND_INT | KIND_VAR | KIND_DECL_TAG => 4,
                KIND_ARRAY => 12,
                KIND_STRUCT | KIND_UNION => {
                    for i in 0..vlen as usize {
                        let m = p + i * 12;
                        let raw = u32_at(tsec, m + 8)?;
                        members.push(Member {
                            name_off: u32_at(tsec, m)?,
                            type_id: u32_at(tsec, m + 4)?,
                            bit_off: if kflag { raw & 0x00ff_ffff } else { raw },
                        });
                    }
                    vlen as usize * 12
                }
                KIND_ENUM => {
                    for i in 0..vlen as usize {
                        let m = p + i * 8;
                        enum_raw.push((u32_at(tsec, m)?, i64::from(u32_at(tsec, m + 4)? as i32)));
                    }
                    vlen as usize * 8
                }
                KIND_FUNC_PROTO => vlen as usize * 8,
                KIND_DATASEC | KIND_ENUM64 => vlen as usize * 12,
                0..=19 => 0,
                _ => return Err(BtfError::Malformed("unknown type kind")),
            };
            p += extra;
            types.push(Type {
                name_off,
                kind,
                size_or_type,
                members,
                vlen,
            });
        }
        let mut btf = Self {
            types,
            strings,
            by_name: HashMap::new(),
            enumerators: HashMap::new(),
        };
        let mut enumerators = HashMap::new();
        for (off, v) in enum_raw {
            enumerators.entry(btf.name(off).to_owned()).or_insert(v);
        }
        btf.enumerators = enumerators;
        let mut by_name = HashMap::new();
        for (id, t) in btf.types.iter().enumerate() {
            if t.name_off != 0 {
                by_name
                    .entry((btf.name(t.name_off).to_owned(), t.kind))
                    .or_insert(id as u32);
            }
        }
        btf.by_name = by_name;
        Ok(btf)
    }

    fn name(&self, off: u32) -> &str {
        let s = self.strings.get(off as usize..).unwrap_or_default();
        let end = s.iter().position(|b| *b == 0).unwrap_or(s.len());
        std::str::from_utf8(&s[..end]).unwrap_or("")
    }

    fn id(&self, name: &str, kind: u32) -> Option<u32> {
        self.by_name.get(&(name.to_owned(), kind)).copied()
    }

    /// Byte offset of `member` in `struct name`, looking into anonymous structs and unions.
    pub fn member_offset(&self, name: &str, member: &str) -> Result<u32, BtfError> {
        let id = self
            .id(name, KIND_STRUCT)
            .ok_or_else(|| BtfError::Missing(format!("struct {name}")))?;
        self.find_member(id, member, 0, 0)
            .map(|bits| bits / 8)
            .ok_or_else(|| BtfError::Missing(format!("{name}.{member}")))
    }

    /// Size in bytes of `struct name`.
    pub fn struct_size(&self, name: &str) -> Result<u32, BtfError> {
        self.id(name, KIND_STRUCT)
            .and_then(|id| self.types.get(id as usize))
            .map(|t| t.size_or_type)
            .ok_or_else(|| BtfError::Missing(format!("struct {name}")))
    }

    /// Value of the enumerator `name` (of any 32-bit enum).
    pub fn enum_value(&self, name: &str) -> Result<i64, BtfError> {
        self.enumerators
            .get(name)
            .copied()
            .ok_or_else(|| BtfError::Missing(format!("enumerator {name}")))
    }

    fn find_member(&self, id: u32, member: &str, base_bits: u32, depth: u32) -> Option<u32> {
        let t = self.types.get(id as usize)?;
        if depth > 8 || !(t.kind == KIND_STRUCT || t.kind == KIND_UNION) {
            return None;
        }
        for m in &t.members {
            if m.name_off != 0 && self.name(m.name_off) == member {
                return Some(base_bits + m.bit_off);
            }
        }
        for m in t.members.iter().filter(|m| m.name_off == 0) {
            if let Some(b) = self.find_member(m.type_id, member, base_bits + m.bit_off, depth + 1) {
                return Some(b);
            }
        }
        None
    }

    /// Number of arguments the `btf_trace_<tp>` prototype passes to a program (without the
    /// leading `void *` the kernel adds), or None when the tracepoint does not exist.
    pub fn tracepoint_args(&self, tp: &str) -> Option<u32> {
        let td = self
            .types
            .get(self.id(&format!("btf_trace_{tp}"), KIND_TYPEDEF)? as usize)?;
        let ptr = self.types.get(td.size_or_type as usize)?;
        if ptr.kind != KIND_PTR {
            return None;
        }
        let proto = self.types.get(ptr.size_or_type as usize)?;
        (proto.kind == KIND_FUNC_PROTO).then(|| proto.vlen.saturating_sub(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_garbage_without_panicking() {
        assert!(Btf::parse(&[]).is_err());
        assert!(Btf::parse(&[0x9f, 0xeb, 1, 0]).is_err());
        let mut hdr = vec![0x9f, 0xeb, 1, 0];
        for v in [24u32, 0, 0xffff_fff0, 0, 4] {
            hdr.extend_from_slice(&v.to_le_bytes());
        }
        assert!(Btf::parse(&hdr).is_err());
    }

    #[test]
    fn reads_the_running_kernel_when_available() {
        let btf = match Btf::from_sys_fs() {
            Ok(b) => b,
            // Reading BTF needs no privilege, but some build hosts have none at all.
            Err(e) if std::env::var_os("CI").is_none() => {
                eprintln!("SKIPPED: kernel BTF parsing not exercised: {e}");
                return;
            }
            Err(e) => panic!("CI machines have kernel BTF: {e}"),
        };
        let tgid = btf.member_offset("task_struct", "tgid").unwrap();
        let pid = btf.member_offset("task_struct", "pid").unwrap();
        assert_eq!(tgid, pid + 4, "pid and tgid are adjacent in task_struct");
        assert_eq!(btf.tracepoint_args("sched_switch"), Some(4));
        assert!(btf.tracepoint_args("no_such_tracepoint").is_none());
        assert_eq!(btf.enum_value("MM_FILEPAGES").unwrap(), 0);
        assert_eq!(btf.enum_value("MM_ANONPAGES").unwrap(), 1);
        assert!(btf.struct_size("percpu_counter").unwrap() >= 8);
        assert!(btf.enum_value("NO_SUCH_ENUMERATOR").is_err());
    }
}
