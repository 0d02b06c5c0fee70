//! Decoding the ABI's binary attribute encoding (guest-sdk/ABI.md, "Attribute encoding").

use neuronlab_core::ops::{AttrValue, Attrs};

fn take<'a>(bytes: &mut &'a [u8], n: usize, what: &str) -> Result<&'a [u8], String> {
    if bytes.len() < n {
        return Err(format!("attribute encoding ends inside {what}"));
    }
    let (head, tail) = bytes.split_at(n);
    *bytes = tail;
    Ok(head)
}

fn u32_at(bytes: &mut &[u8], what: &str) -> Result<u32, String> {
    Ok(u32::from_le_bytes(
        take(bytes, 4, what)?.try_into().expect("4 bytes"),
    ))
}

fn i64_at(bytes: &mut &[u8], what: &str) -> Result<i64, String> {
    Ok(i64::from_le_bytes(
        take(bytes, 8, what)?.try_into().expect("8 bytes"),
    ))
}

/// Decodes `kind:u8 name_len:u8 name payload` entries until the bytes run out.
pub fn decode(mut bytes: &[u8]) -> Result<Attrs, String> {
    let mut attrs = Attrs::new();
    while !bytes.is_empty() {
        let kind = take(&mut bytes, 1, "an entry kind")?[0];
        let name_len = take(&mut bytes, 1, "a name length")?[0] as usize;
        let name = std::str::from_utf8(take(&mut bytes, name_len, "a name")?)
            .map_err(|_| "an attribute name is not UTF-8".to_string())?
            .to_string();
        let value = match kind {
            1 => AttrValue::Int(i64_at(&mut bytes, &name)?),
            2 => AttrValue::Float(f64::from_bits(i64_at(&mut bytes, &name)? as u64)),
            3 => {
                let count = u32_at(&mut bytes, &name)? as usize;
                if count > bytes.len() / 8 {
                    return Err(format!("attribute '{name}' claims {count} ints but the encoding ends first"));
                }
                let v = (0..count).map(|_| i64_at(&mut bytes, &name)).collect::<Result<_, _>>()?;
                AttrValue::Ints(v)
            }
            4 => {
                let len = u32_at(&mut bytes, &name)? as usize;
                let s = std::str::from_utf8(take(&mut bytes, len, &name)?)
                    .map_err(|_| format!("attribute '{name}' is not UTF-8"))?;
                AttrValue::Str(s.to_string())
            }
            k => return Err(format!("attribute '{name}' has unknown kind {k} (expected 1 int, 2 float, 3 ints, 4 string)")),
        };
        attrs.0.push((name, value));
    }
    Ok(attrs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(kind: u8, name: &str, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![kind, name.len() as u8];
        v.extend_from_slice(name.as_bytes());
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn decodes_every_kind() {
        let mut b = entry(1, "dim", &(-1i64).to_le_bytes());
        b.extend(entry(2, "eps", &1e-5f64.to_le_bytes()));
        let mut ints = 2u32.to_le_bytes().to_vec();
        ints.extend(3i64.to_le_bytes());
        ints.extend(4i64.to_le_bytes());
        b.extend(entry(3, "shape", &ints));
        let mut s = 4u32.to_le_bytes().to_vec();
        s.extend(b"tanh");
        b.extend(entry(4, "approximate", &s));
        let a = decode(&b).unwrap();
        assert_eq!(
            a.0,
            vec![
                ("dim".into(), AttrValue::Int(-1)),
                ("eps".into(), AttrValue::Float(1e-5)),
                ("shape".into(), AttrValue::Ints(vec![3, 4])),
                ("approximate".into(), AttrValue::Str("tanh".into())),
            ]
        );
    }

    #[test]
    fn truncated_and_unknown_entries_are_errors() {
        let b = entry(1, "dim", &[1, 2, 3]);
        assert!(decode(&b).unwrap_err().contains("ends inside"));
        let b = entry(9, "x", &[]);
        assert!(decode(&b).unwrap_err().contains("unknown kind 9"));
        let b = entry(3, "shape", &u32::MAX.to_le_bytes());
        assert!(decode(&b).unwrap_err().contains("claims"));
    }
}
