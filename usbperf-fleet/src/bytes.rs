//! Owns the compact binary form the fleet's stored rows are written in (a collector's fleet
//! records and summaries): little-endian, lengths and counts as LEB128, a figure as its 8
//! bytes (exact, no float parsing), a string as its length and bytes. The reader refuses
//! what the writer cannot have written, naming the field: a count is checked against the
//! bytes left before anything is allocated for it.

/// Why stored bytes do not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BytesError {
    #[error("it ends inside {0}")]
    Truncated(&'static str),
    #[error("{0} is not UTF-8")]
    NotUtf8(&'static str),
    #[error("{0} is out of range")]
    Range(&'static str),
    #[error("{0} trailing bytes")]
    Trailing(usize),
}

/// Appends fields to a buffer.
#[derive(Debug, Default)]
pub struct Writer(pub Vec<u8>);

impl Writer {
    pub fn with_capacity(n: usize) -> Writer {
        Writer(Vec::with_capacity(n))
    }

    pub fn byte(&mut self, b: u8) {
        self.0.push(b);
    }

    pub fn len(&mut self, n: usize) {
        self.u64(n as u64);
    }

    pub fn u64(&mut self, mut n: u64) {
        loop {
            let low = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                self.0.push(low);
                return;
            }
            self.0.push(low | 0x80);
        }
    }

    /// A signed number, zigzag-encoded so that small negatives stay small.
    pub fn i64(&mut self, v: i64) {
        self.u64(((v << 1) ^ (v >> 63)) as u64);
    }

    pub fn str(&mut self, s: &str) {
        self.len(s.len());
        self.0.extend_from_slice(s.as_bytes());
    }

    pub fn opt_str(&mut self, s: &Option<String>) {
        self.bool(s.is_some());
        if let Some(s) = s {
            self.str(s);
        }
    }

    /// Bytes with their length.
    pub fn blob(&mut self, b: &[u8]) {
        self.len(b.len());
        self.0.extend_from_slice(b);
    }

    pub fn bool(&mut self, b: bool) {
        self.0.push(u8::from(b));
    }

    pub fn f64(&mut self, v: f64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    pub fn opt_f64(&mut self, v: Option<f64>) {
        self.bool(v.is_some());
        if let Some(v) = v {
            self.f64(v);
        }
    }
}

/// Reads what [`Writer`] wrote; `what` names the field for the error.
#[derive(Debug)]
pub struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub fn new(b: &'a [u8]) -> Reader<'a> {
        Reader { b, at: 0 }
    }

    /// Bytes not read yet.
    pub fn left(&self) -> usize {
        self.b.len() - self.at
    }

    /// Ok when every byte was read.
    pub fn finish(&self) -> Result<(), BytesError> {
        match self.left() {
            0 => Ok(()),
            n => Err(BytesError::Trailing(n)),
        }
    }

    pub fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], BytesError> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or(BytesError::Truncated(what))?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }

    pub fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], BytesError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }

    pub fn byte(&mut self, what: &'static str) -> Result<u8, BytesError> {
        Ok(self.take(1, what)?[0])
    }

    pub fn u64(&mut self, what: &'static str) -> Result<u64, BytesError> {
        let mut n = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte(what)?;
            let part = u64::from(b & 0x7f);
            if shift == 63 && part > 1 {
                return Err(BytesError::Range(what));
            }
            n |= part << shift;
            if b & 0x80 == 0 {
                return Ok(n);
            }
        }
        Err(BytesError::Range(what))
    }

    pub fn i64(&mut self, what: &'static str) -> Result<i64, BytesError> {
        let z = self.u64(what)?;
        Ok((z >> 1) as i64 ^ -((z & 1) as i64))
    }

    pub fn len(&mut self, what: &'static str) -> Result<usize, BytesError> {
        usize::try_from(self.u64(what)?).map_err(|_| BytesError::Range(what))
    }

    /// A count of items that take at least `min_bytes` each: refused when the bytes left
    /// cannot hold them, so no allocation is made that the input does not back.
    pub fn count(&mut self, min_bytes: usize, what: &'static str) -> Result<usize, BytesError> {
        let n = self.len(what)?;
        if n.saturating_mul(min_bytes.max(1)) > self.left() {
            return Err(BytesError::Truncated(what));
        }
        Ok(n)
    }

    pub fn str(&mut self, what: &'static str) -> Result<&'a str, BytesError> {
        let n = self.len(what)?;
        std::str::from_utf8(self.take(n, what)?).map_err(|_| BytesError::NotUtf8(what))
    }

    pub fn string(&mut self, what: &'static str) -> Result<String, BytesError> {
        self.str(what).map(str::to_string)
    }

    pub fn opt_string(&mut self, what: &'static str) -> Result<Option<String>, BytesError> {
        Ok(if self.bool(what)? {
            Some(self.string(what)?)
        } else {
            None
        })
    }

    pub fn blob(&mut self, what: &'static str) -> Result<&'a [u8], BytesError> {
        let n = self.len(what)?;
        self.take(n, what)
    }

    pub fn bool(&mut self, what: &'static str) -> Result<bool, BytesError> {
        match self.byte(what)? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(BytesError::Range(what)),
        }
    }

    pub fn f64(&mut self, what: &'static str) -> Result<f64, BytesError> {
        Ok(f64::from_le_bytes(self.array(what)?))
    }

    pub fn opt_f64(&mut self, what: &'static str) -> Result<Option<f64>, BytesError> {
        Ok(if self.bool(what)? {
            Some(self.f64(what)?)
        } else {
            None
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_written_reads_back_and_a_cut_or_overlong_field_is_refused() {
        let mut w = Writer::default();
        w.u64(u64::MAX);
        w.i64(-5);
        w.i64(i64::MIN);
        w.str("é");
        w.opt_str(&None);
        w.f64(-0.25);
        w.opt_f64(Some(1e300));
        w.blob(&[1, 2, 3]);
        let b = w.0;
        let mut r = Reader::new(&b);
        assert_eq!(r.u64("a").unwrap(), u64::MAX);
        assert_eq!(r.i64("b").unwrap(), -5);
        assert_eq!(r.i64("b").unwrap(), i64::MIN);
        assert_eq!(r.str("c").unwrap(), "é");
        assert_eq!(r.opt_string("d").unwrap(), None);
        assert_eq!(r.f64("e").unwrap(), -0.25);
        assert_eq!(r.opt_f64("f").unwrap(), Some(1e300));
        assert_eq!(r.blob("g").unwrap(), &[1, 2, 3]);
        assert_eq!(r.finish(), Ok(()));
        for cut in 0..b.len() {
            let mut r = Reader::new(&b[..cut]);
            let all = (|| -> Result<(), BytesError> {
                r.u64("a")?;
                r.i64("b")?;
                r.i64("b")?;
                r.str("c")?;
                r.opt_string("d")?;
                r.f64("e")?;
                r.opt_f64("f")?;
                r.blob("g")?;
                Ok(())
            })();
            assert!(all.is_err(), "cut at {cut}");
        }
        // An 11-byte varint, a count the bytes cannot back, a bool of 2.
        let long = [0xffu8; 10].iter().copied().chain([1]).collect::<Vec<_>>();
        assert_eq!(Reader::new(&long).u64("x"), Err(BytesError::Range("x")));
        assert_eq!(
            Reader::new(&[0xff, 0xff, 0xff, 0x7f, 0]).count(3, "items"),
            Err(BytesError::Truncated("items"))
        );
        assert_eq!(
            Reader::new(&[2]).bool("flag"),
            Err(BytesError::Range("flag"))
        );
    }
}
