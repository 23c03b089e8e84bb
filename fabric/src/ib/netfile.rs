//! ibsim's net-file format (reference §4.2): node records
//! `Switch|Hca <ports> "<name>"` followed by `[port] "<peer>"[peer port]`
//! lines; `#` comments; `switchguid=`/`caguid=` lines pin the next node's
//! GUID. GUIDs otherwise as ibsim allocates them: switches 0x200000 + 1
//! each, CAs 0x100000 + (ports + 1) each, a CA port's GUID = node + port.

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetNode {
    pub switch: bool,
    pub name: String,
    pub num_ports: u8,
    pub guid: u64,
    /// (port, peer name, peer port).
    pub links: Vec<(u8, String, u8)>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetError {
    #[error("net file line {line}: {why}")]
    Syntax { line: usize, why: String },
    #[error("net file: {0}")]
    Topology(String),
}

fn quoted(s: &str) -> Option<(&str, &str)> {
    let a = s.find('"')?;
    let b = a + 1 + s[a + 1..].find('"')?;
    Some((&s[a + 1..b], &s[b + 1..]))
}

fn bracketed(s: &str) -> Option<(u8, &str)> {
    let s = s.trim_start();
    let rest = s.strip_prefix('[')?;
    let end = rest.find(']')?;
    Some((rest[..end].trim().parse().ok()?, &rest[end + 1..]))
}

/// Parses a net file; checks that every link is declared at both ends alike.
pub fn parse(text: &str) -> Result<Vec<NetNode>, NetError> {
    let (mut sw_guid, mut ca_guid) = (0x200000u64, 0x100000u64);
    let mut pinned: Option<u64> = None;
    let mut nodes: Vec<NetNode> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        let err = |why: &str| NetError::Syntax { line: i + 1, why: why.into() };
        if line.is_empty() {
            continue;
        }
        if let Some(v) = line.strip_prefix("switchguid=").or_else(|| line.strip_prefix("caguid=")) {
            let v = v.split(['(', ' ']).next().unwrap_or("").trim_start_matches("0x");
            pinned = Some(u64::from_str_radix(v, 16).map_err(|_| err("bad GUID"))?);
            continue;
        }
        let kind = line.split_whitespace().next().unwrap_or("");
        if kind == "Switch" || kind == "Hca" || kind == "Ca" {
            let switch = kind == "Switch";
            let n: u8 = line[kind.len()..]
                .split_whitespace()
                .next()
                .and_then(|n| n.parse().ok())
                .filter(|&n| n >= 1)
                .ok_or_else(|| err("a node needs a port count of 1..=255"))?;
            let (name, _) = quoted(line).ok_or_else(|| err("a node needs a \"name\""))?;
            let guid = match (pinned.take(), switch) {
                (Some(g), _) => g,
                (None, true) => {
                    sw_guid += 1;
                    sw_guid - 1
                }
                (None, false) => {
                    ca_guid += u64::from(n) + 1;
                    ca_guid - u64::from(n) - 1
                }
            };
            if nodes.iter().any(|x| x.name == name) {
                return Err(err("duplicate node name"));
            }
            nodes.push(NetNode { switch, name: name.into(), num_ports: n, guid, links: Vec::new() });
            continue;
        }
        if line.starts_with('[') {
            let (port, rest) = bracketed(line).ok_or_else(|| err("a port line is [port] \"peer\"[port]"))?;
            let (peer, rest) = quoted(rest).ok_or_else(|| err("a port line needs a \"peer\""))?;
            let (pport, _) = bracketed(rest).ok_or_else(|| err("a port line needs the peer's [port]"))?;
            let node = nodes.last_mut().ok_or_else(|| err("a port line before any node"))?;
            if port == 0 || port > node.num_ports {
                return Err(err("port number out of range"));
            }
            node.links.push((port, peer.into(), pport));
            continue;
        }
        // Other ibsim directives (vendid=, devid=, width=, do ...) are not modelled.
    }
    for n in &nodes {
        for (p, peer, q) in &n.links {
            let m = nodes
                .iter()
                .find(|m| &m.name == peer)
                .ok_or_else(|| NetError::Topology(format!("{}[{p}] names unknown node {peer:?}", n.name)))?;
            if !m.links.iter().any(|(mp, mpeer, mq)| mp == q && mpeer == &n.name && mq == p) {
                return Err(NetError::Topology(format!("{}[{p}] -> {peer}[{q}] is not declared back", n.name)));
            }
        }
    }
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guids_follow_ibsim_and_links_must_match() {
        let t = "# c\nSwitch\t8 \"S1\"\n[1]\t\"H1\"[1]\n\nHca 2 \"H1\"\n[1] \"S1\"[1]\ncaguid=0x55\nHca 1 \"H2\"\n";
        let n = parse(t).unwrap();
        assert_eq!((n[0].guid, n[1].guid, n[2].guid), (0x200000, 0x100000, 0x55));
        assert_eq!(n[0].links, vec![(1, "H1".to_string(), 1)]);
        assert!(matches!(parse("Switch 8 \"S1\"\n[1] \"H1\"[1]\nHca 1 \"H1\"\n"), Err(NetError::Topology(_))));
        assert!(matches!(parse("[1] \"H1\"[1]\n"), Err(NetError::Syntax { line: 1, .. })));
    }
}
