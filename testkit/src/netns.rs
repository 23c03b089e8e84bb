//! Network namespaces and veth pairs that a test makes and removes itself
//! (root only): the tests that need a network beyond loopback.

use std::process::Command;

/// Whether the tests run as root (namespaces, raw sockets, TUN devices).
pub fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(2) == Some("0")))
        .unwrap_or(false)
}

/// Runs `ip ARGS...`; the error says which command failed and why.
pub fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Network namespaces with their loopback up, removed on drop (with
/// whatever the test put in them, veth ends included).
pub struct Namespaces(pub Vec<String>);

impl Namespaces {
    /// `names`, made unique to this process.
    pub fn make(names: &[&str]) -> Result<Namespaces, String> {
        let id = std::process::id() % 100_000;
        let mut ns = Namespaces(Vec::new());
        for n in names {
            let name = format!("{n}{id}");
            ip(&["netns", "add", &name])?;
            ns.0.push(name);
            ip(&["-n", ns.0.last().expect("just pushed"), "link", "set", "lo", "up"])?;
        }
        Ok(ns)
    }

    /// A command run inside namespace `i`.
    pub fn cmd(&self, i: usize, prog: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.0[i], prog]);
        c
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for n in &self.0 {
            let _ = ip(&["netns", "del", n]);
        }
    }
}

/// Two namespaces joined by a veth pair (10.213.x.1/24 and .2), removed
/// with the namespaces.
pub struct Veth {
    pub ns: Namespaces,
    pub dev: [String; 2],
    pub addr: [String; 2],
}

impl Veth {
    /// The pair `tag` (one letter: each test of a binary its own).
    pub fn new(tag: &str) -> Result<Veth, String> {
        Veth::named(&format!("srr{tag}"), &format!("sr{tag}"), 213)
    }

    /// A pair whose namespaces are `{ns}a{PID}` and `{ns}b{PID}`, whose
    /// ends are `{dev}{PID}a` and `{dev}{PID}b` (at most 15 characters:
    /// `dev` of up to 4), on 10.`net`.x.1/24 and .2 (x from the PID).
    pub fn named(ns: &str, dev: &str, net: u8) -> Result<Veth, String> {
        let id = std::process::id() % 100_000;
        let ns = Namespaces::make(&[&format!("{ns}a"), &format!("{ns}b")])?;
        let dev = [format!("{dev}{id}a"), format!("{dev}{id}b")];
        let sub = id % 250;
        let addr = [format!("10.{net}.{sub}.1"), format!("10.{net}.{sub}.2")];
        ip(&["link", "add", &dev[0], "type", "veth", "peer", "name", &dev[1]])?;
        for i in 0..2 {
            ip(&["link", "set", &dev[i], "netns", &ns.0[i]])?;
            ip(&["-n", &ns.0[i], "addr", "add", &format!("{}/24", addr[i]), "dev", &dev[i]])?;
            ip(&["-n", &ns.0[i], "link", "set", &dev[i], "up"])?;
        }
        Ok(Veth { ns, dev, addr })
    }

    /// A command run inside namespace `i`.
    pub fn cmd(&self, i: usize, prog: &str) -> Command {
        self.ns.cmd(i, prog)
    }
}
