//! Body templates: `{{seq}}`, `{{uuid}}`, `{{word}}`, `{{timestamp}}` are replaced per request,
//! so bulk-write scenarios can send varied documents.

use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Seq,
    Uuid,
    Word,
    Timestamp,
}

#[derive(Debug, Clone)]
pub struct Template {
    parts: Vec<Part>,
}

const WORDS: &[&str] = &[
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet",
    "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango",
    "uniform", "victor", "whiskey", "xray", "yankee", "zulu",
];

impl Template {
    pub fn parse(text: &str) -> Result<Template, String> {
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(start) = rest.find("{{") {
            if start > 0 {
                parts.push(Part::Text(rest[..start].to_string()));
            }
            let end = rest[start..]
                .find("}}")
                .ok_or_else(|| format!("unterminated `{{{{` in template at byte {start}"))?;
            let name = rest[start + 2..start + end].trim();
            parts.push(match name {
                "seq" => Part::Seq,
                "uuid" => Part::Uuid,
                "word" => Part::Word,
                "timestamp" => Part::Timestamp,
                other => {
                    return Err(format!(
                        "unknown template variable `{other}`; expected seq, uuid, word or timestamp"
                    ))
                }
            });
            rest = &rest[start + end + 2..];
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_string()));
        }
        Ok(Template { parts })
    }

    /// True when every rendering is identical (no variables).
    pub fn is_constant(&self) -> bool {
        self.parts.iter().all(|p| matches!(p, Part::Text(_)))
    }

    pub fn render(&self, seq: u64, out: &mut Vec<u8>) {
        for part in &self.parts {
            match part {
                Part::Text(t) => out.extend_from_slice(t.as_bytes()),
                Part::Seq => out.extend_from_slice(seq.to_string().as_bytes()),
                Part::Uuid => {
                    let mut b: [u8; 16] = fastrand::u128(..).to_le_bytes();
                    b[6] = (b[6] & 0x0f) | 0x40;
                    b[8] = (b[8] & 0x3f) | 0x80;
                    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
                    let uuid = format!(
                        "{}-{}-{}-{}-{}",
                        &hex[0..8],
                        &hex[8..12],
                        &hex[12..16],
                        &hex[16..20],
                        &hex[20..32]
                    );
                    out.extend_from_slice(uuid.as_bytes());
                }
                Part::Word => {
                    out.extend_from_slice(WORDS[fastrand::usize(..WORDS.len())].as_bytes())
                }
                Part::Timestamp => {
                    let ms = SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .map(|d| d.as_millis())
                        .unwrap_or(0);
                    out.extend_from_slice(ms.to_string().as_bytes());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_variables() {
        let t =
            Template::parse(r#"{"id":{{seq}},"u":"{{uuid}}","w":"{{ word }}","t":{{timestamp}}}"#)
                .unwrap();
        let mut out = Vec::new();
        t.render(7, &mut out);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["id"], 7);
        assert_eq!(v["u"].as_str().unwrap().len(), 36);
        assert_eq!(&v["u"].as_str().unwrap()[14..15], "4");
        assert!(WORDS.contains(&v["w"].as_str().unwrap()));
        assert!(v["t"].as_u64().unwrap() > 1_700_000_000_000);
        assert!(!t.is_constant());
        assert!(Template::parse("plain").unwrap().is_constant());
        assert!(Template::parse("{{nope}}").is_err());
        assert!(Template::parse("{{seq").is_err());
    }
}
