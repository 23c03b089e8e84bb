//! `rdma-sm --ibsim` against OFED's ibsim, read back with infiniband-diags
//! under libumad2sim, and compared with opensm on the same fabric
//! (reference §8.2, §8.3). Skips, saying so, when the Debian packages
//! ibsim-utils, opensm or infiniband-diags are not installed.

use serde_json::Value;
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const SIM: &str = "/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so";
const NETS: &str = "/usr/share/doc/ibsim-utils/net-examples";

fn have(tool: &str) -> bool {
    Command::new("sh").args(["-c", &format!("command -v {tool}")]).output().is_ok_and(|o| o.status.success())
}

fn have_tools() -> bool {
    let missing: Vec<&str> = ["ibsim", "opensm", "ibnetdiscover", "ibroute", "smpquery", "iblinkinfo"]
        .into_iter()
        .filter(|t| {
            Command::new("sh").args(["-c", &format!("command -v {t}")]).output().map_or(true, |o| !o.status.success())
        })
        .collect();
    if !missing.is_empty() || !Path::new(SIM).exists() {
        testkit::skip(format!("needs ibsim-utils, opensm and infiniband-diags (missing: {missing:?}, {SIM})"));
        return false;
    }
    true
}

/// An ibsim running `net` with its console on a pipe we hold open, under
/// a private socket name and working directory.
struct Ibsim {
    child: Child,
    stdin: Option<std::process::ChildStdin>,
    sock: String,
    dir: PathBuf,
}

impl Ibsim {
    fn start(tag: &str, net: &Path) -> Ibsim {
        let sock = format!("rsmtest{}{tag}", std::process::id());
        let dir = std::env::temp_dir().join(&sock);
        for attempt in 1.. {
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            let mut child = Command::new("ibsim")
                .args(["-s", net.to_str().unwrap()])
                .env("IBSIM_SOCKNAME", &sock)
                .current_dir(&dir)
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(dir.join("ibsim.err")).unwrap())
                .spawn()
                .expect("ibsim starts");
            let stdin = child.stdin.take();
            std::thread::sleep(Duration::from_millis(700));
            let mut sim = Ibsim { child, stdin, sock: sock.clone(), dir: dir.clone() };
            match sim.exited() {
                None => return sim,
                // Seen once in CI: ibsim gone before any client, and
                // opensm then waited for it forever.
                Some(why) if attempt < 3 => eprintln!("ibsim {tag} exited at start ({why}); starting it again"),
                Some(why) => panic!("ibsim {tag} exited at start three times; the last: {why}"),
            }
        }
        unreachable!()
    }

    /// None while ibsim runs; else how it ended and what it said.
    fn exited(&mut self) -> Option<String> {
        let status = self.child.try_wait().expect("wait on ibsim")?;
        let err = std::fs::read_to_string(self.dir.join("ibsim.err")).unwrap_or_default();
        Some(format!("{status}: {}", err.trim()))
    }

    /// Runs a tool as an ibsim client attached at `host`.
    fn tool(&self, host: &str, cmd: &str, args: &[&str], preload: bool) -> std::process::Output {
        let mut c = Command::new(cmd);
        c.args(args).env("IBSIM_SOCKNAME", &self.sock).env("SIM_HOST", host).current_dir(&self.dir);
        if preload {
            c.env("LD_PRELOAD", SIM);
        }
        c.output().unwrap_or_else(|e| panic!("{cmd}: {e}"))
    }

    fn text(&self, host: &str, cmd: &str, args: &[&str]) -> String {
        let o = self.tool(host, cmd, args, true);
        assert!(o.status.success(), "{cmd} {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn rdma_sm(&self, host: &str, extra: &[&str]) -> Value {
        let mut args = vec!["--ibsim", "--once", "--json"];
        args.extend_from_slice(extra);
        let o = self.tool(host, env!("CARGO_BIN_EXE_rdma-sm"), &args, false);
        assert!(o.status.success(), "rdma-sm failed: {}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).expect("rdma-sm --json")
    }
}

impl Drop for Ibsim {
    fn drop(&mut self) {
        if let Some(mut s) = self.stdin.take() {
            let _ = s.write_all(b"Quit\n");
        }
        std::thread::sleep(Duration::from_millis(100));
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs `opensm -o` (plus `extra`) as an ibsim client attached at `host`,
/// in `dir`, with its cache and dump directories there; panics, quoting
/// osm.log and what opensm printed, unless it reaches the end of its sweep.
/// A start that dies before opensm's first sweep (exit 255 with nothing in
/// osm.log past the version banner: umad2sim's client set-up exits so, seen
/// once in CI) is tried again, twice at most, saying so.
fn run_opensm(sock: &str, dir: &Path, host: &str, extra: &[&str]) {
    let (cache, dump) = (dir.join("cache"), dir.join("dump"));
    std::fs::create_dir_all(&cache).unwrap();
    std::fs::create_dir_all(&dump).unwrap();
    let text = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
    let printed = || ["osm.log", "opensm.out", "opensm.err"].map(|f| format!("{f}:\n{}", text(f))).join("\n");
    for attempt in 1.. {
        let _ = std::fs::remove_file(dir.join("osm.log"));
        let mut c = Command::new("opensm");
        c.args(["-o", "-D", "0x43", "-f", "osm.log", "--dump_files_dir", dump.to_str().unwrap()])
            .args(extra)
            .env("IBSIM_SOCKNAME", sock)
            .env("SIM_HOST", host)
            .env("LD_PRELOAD", SIM)
            .env("OSM_CACHE_DIR", &cache)
            .env("OSM_TMP_DIR", &dump)
            .current_dir(dir)
            .stdout(std::fs::File::create(dir.join("opensm.out")).unwrap())
            .stderr(std::fs::File::create(dir.join("opensm.err")).unwrap());
        // opensm waits for its port for ever: a hang is a failure that says so.
        let (out, in_time) = testkit::wait(c.spawn().unwrap(), Duration::from_secs(120));
        assert!(in_time, "opensm -o still running after 120 s\n{}", printed());
        if out.status.success() {
            return;
        }
        let banner_only = text("osm.log").lines().all(|l| l.contains("-> OpenSM "));
        if out.status.code() == Some(255) && banner_only && attempt < 3 {
            eprintln!("opensm -o died at start ({}); starting it again\n{}", out.status, printed());
            continue;
        }
        panic!("opensm -o failed: {}\n{}", out.status, printed());
    }
}

/// port GUID -> LID, from rdma-sm's JSON.
fn our_lids(v: &Value) -> HashMap<u64, u16> {
    v["lids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (hex(l["port_guid"].as_str().unwrap()), l["lid"].as_u64().unwrap() as u16))
        .collect()
}

fn hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap()
}

/// switch GUID -> (LID -> port).
type Lfts = HashMap<u64, HashMap<u16, u8>>;

/// The LFTs in rdma-sm's JSON.
fn our_lfts(v: &Value) -> Lfts {
    v["lfts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let lft = s["lft"].as_object().unwrap();
            (
                hex(s["guid"].as_str().unwrap()),
                lft.iter().map(|(k, p)| (k.parse().unwrap(), p.as_u64().unwrap() as u8)).collect(),
            )
        })
        .collect()
}

/// `ibroute` / dump_lfts lines: `0x0004 003 ...` -> (4, 3).
fn parse_lft_lines(text: &str) -> HashMap<u16, u8> {
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let lid = u16::from_str_radix(w.next()?.strip_prefix("0x")?, 16).ok()?;
            let port = w.next()?.parse().ok()?;
            Some((lid, port))
        })
        .collect()
}

/// ibnetdiscover's links: (guid, port) -> (guid, port).
fn links(text: &str) -> HashMap<(u64, u8), (u64, u8)> {
    let mut m = HashMap::new();
    let mut cur = 0u64;
    for l in text.lines() {
        if l.starts_with("Switch") || l.starts_with("Ca") {
            let q = l.split('"').nth(1).unwrap();
            cur = hex(&q[2..]);
        } else if let Some(rest) = l.strip_prefix('[') {
            let p: u8 = rest.split(']').next().unwrap().parse().unwrap();
            let mut parts = l.split('"');
            let peer = hex(&parts.nth(1).unwrap()[2..]);
            let tail = parts.next().unwrap();
            let q: u8 = tail.trim_start_matches('[').split(']').next().unwrap().parse().unwrap();
            m.insert((cur, p), (peer, q));
        }
    }
    m
}

/// Hops from switch `sw` to `lid` following `lfts` over `links`.
fn hops(sw: u64, lid: u16, lfts: &Lfts, links: &HashMap<(u64, u8), (u64, u8)>) -> u32 {
    let (mut at, mut n) = (sw, 0);
    loop {
        let port = lfts[&at][&lid];
        if port == 0 {
            return n;
        }
        let (next, _) = links[&(at, port)];
        n += 1;
        if !lfts.contains_key(&next) {
            return n; // a CA: the destination
        }
        at = next;
        assert!(n < 32, "a forwarding loop towards LID {lid}");
    }
}

fn configure_and_check(tag: &str, net: &Path, host: &str, extra: &[&str]) -> (Value, Ibsim) {
    let sim = Ibsim::start(tag, net);
    let v = sim.rdma_sm(host, extra);
    // Every cabled port Active (iblinkinfo: one line per link).
    let li = sim.text(host, "iblinkinfo", &[]);
    // Cabled ports name their peer after the arrow; free ones show `""`.
    let cabled = |l: &&str| l.split("==>").nth(1).is_some_and(|t| t.contains('"') && !t.contains("\"\""));
    let link_lines: Vec<&str> = li.lines().filter(cabled).collect();
    assert!(!link_lines.is_empty(), "{li}");
    for l in &link_lines {
        assert!(l.contains("Active/  LinkUp"), "not Active: {l}");
    }
    // ibroute on every switch shows exactly the LFT we intended.
    let lids = our_lids(&v);
    for (guid, lft) in our_lfts(&v) {
        let lid = lids[&guid];
        let got = parse_lft_lines(&sim.text(host, "ibroute", &[&lid.to_string()]));
        assert_eq!(&got, &lft, "switch {guid:#x} (LID {lid}): ibroute vs rdma-sm");
    }
    (v, sim)
}

#[test]
fn rdma_sm_configures_ibsim_and_the_diags_agree() {
    if !have_tools() {
        return;
    }
    let net = Path::new(NETS).join("net.2sw2path4hca");
    let (v, sim) = configure_and_check("a", &net, "Hca1", &[]);
    assert_eq!(v["sm_lid"], 1);
    // Values we programmed, read back by smpquery on an HCA (LID 4).
    let pi = sim.text("Hca1", "smpquery", &["portinfo", "4", "1"]);
    assert!(pi.contains("LinkState:.......................Active"), "{pi}");
    assert!(pi.contains("SMLid:...........................1"), "{pi}");
    let pk = sim.text("Hca1", "smpquery", &["pkeys", "4"]);
    assert!(pk.lines().any(|l| l.trim_start().starts_with("0: 0xffff")), "{pk}");
    let vl = sim.text("Hca1", "smpquery", &["vlarb", "4"]);
    assert!(vl.contains("WEIGHT: |0x4 |0x4 |0x4 |0x4 |0x4 |0x4 |0x4 |0x4 |"), "{vl}");
    let sl = sim.text("Hca1", "smpquery", &["sl2vl", "4"]);
    assert!(sl.contains("| 0| 1| 2| 3| 4| 5| 6| 7| 0| 1| 2| 3| 4| 5| 6| 7|"), "SL i -> VL i mod 8: {sl}");
    // ibnetdiscover sees the input topology: 2 switches, 4 HCAs, 2 parallel links.
    let nd = sim.text("Hca1", "ibnetdiscover", &[]);
    assert_eq!(nd.lines().filter(|l| l.starts_with("Switch")).count(), 2, "{nd}");
    assert_eq!(nd.lines().filter(|l| l.starts_with("Ca")).count(), 4, "{nd}");
    assert_eq!(links(&nd).len(), 2 * (4 + 2), "{nd}");
}

/// opensm -o on a fresh ibsim of the same net: (guid2lid, per-switch LFT
/// from opensm-lfts.dump, per-switch per-LID hops from opensm.fdbs).
fn opensm(tag: &str, net: &Path, host: &str, extra: &[&str]) -> (HashMap<u64, u16>, Lfts, String) {
    let sim = Ibsim::start(tag, net);
    run_opensm(&sim.sock, &sim.dir, host, extra);
    let (cache, dump) = (sim.dir.join("cache"), sim.dir.join("dump"));
    let g2l = std::fs::read_to_string(cache.join("guid2lid")).unwrap();
    let lids = g2l
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some((hex(w.next()?), u16::from_str_radix(w.next()?.trim_start_matches("0x"), 16).ok()?))
        })
        .collect();
    let dump_text = std::fs::read_to_string(dump.join("opensm-lfts.dump")).unwrap();
    let mut lfts = HashMap::new();
    for sec in dump_text.split("Unicast lids").skip(1) {
        let guid = hex(sec.split("guid ").nth(1).unwrap().split_whitespace().next().unwrap());
        lfts.insert(guid, parse_lft_lines(sec));
    }
    let nd = sim.text(host, "ibnetdiscover", &[]);
    (lids, lfts, nd)
}

fn parity(net: &Path, tag: &str, host: &str) {
    let (osm_lids, osm_lfts, nd) = opensm(&format!("{tag}o"), net, host, &[]);
    let (v, _sim) = configure_and_check(&format!("{tag}r"), net, host, &[]);
    assert_eq!(our_lids(&v), osm_lids, "LIDs: rdma-sm vs opensm's guid2lid");
    let ours = our_lfts(&v);
    let l = links(&nd);
    let (mut same, mut total) = (0, 0);
    for (sw, lft) in &ours {
        for (&lid, &port) in lft {
            let h_ours = hops(*sw, lid, &ours, &l);
            let h_osm = hops(*sw, lid, &osm_lfts, &l);
            assert_eq!(h_ours, h_osm, "switch {sw:#x} LID {lid}: {h_ours} hops, opensm {h_osm}");
            total += 1;
            same += usize::from(osm_lfts[sw][&lid] == port);
        }
    }
    eprintln!("{tag}: {same} of {total} LFT entries identical to opensm's, all of equal (minimal) hops");
    assert!(same * 10 >= total * 8, "{same} of {total}");
}

fn ring5() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rsm-ring5-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut s = String::new();
    for i in 1..=5 {
        let (next, prev) = (i % 5 + 1, (i + 3) % 5 + 1);
        s += &format!("Switch\t8 \"S{i}\"\n[1]\t\"H{i}\"[1]\n[2]\t\"S{next}\"[3]\n[3]\t\"S{prev}\"[2]\n\n");
    }
    for i in 1..=5 {
        s += &format!("Hca\t1 \"H{i}\"\n[1]\t\"S{i}\"[1]\n\n");
    }
    let p = dir.join("ring5.net");
    std::fs::write(&p, s).unwrap();
    p
}

#[test]
fn lids_and_min_hop_lfts_match_opensm() {
    if !have_tools() {
        return;
    }
    parity(&ring5(), "ring5", "H1");
    parity(&Path::new(NETS).join("net.2sw2path4hca"), "2sw", "Hca1");
}

#[test]
fn updown_on_the_ring_brings_every_port_up() {
    if !have_tools() {
        return;
    }
    let (v, _sim) = configure_and_check("u", &ring5(), "H1", &["--routing", "updn", "--root", "0x200000"]);
    // The route from S3 (0x200002) to H5 cannot go down to S4 then up to S5:
    // it goes round through the root.
    let lids = our_lids(&v);
    let h5 = lids.iter().find(|(g, _)| **g == 0x100009).map(|(_, l)| *l).expect("H5's port GUID");
    assert_eq!(our_lfts(&v)[&0x200002][&h5], 3, "S3 -> H5 leaves by port 3 (towards S2 and the root)");
}

/// The emulated fabric's SMAs answer the SM as ibsim's do: the same net
/// file gives the same LIDs and LFTs on both.
#[test]
fn the_emulated_fabric_and_ibsim_give_the_sm_the_same_subnet() {
    if !have_tools() {
        return;
    }
    for (net, host) in [(Path::new(NETS).join("net.2sw2path4hca"), "Hca1"), (ring5(), "H1")] {
        let sim = Ibsim::start("e", &net);
        let on_ibsim = sim.rdma_sm(host, &[]);
        let o = Command::new(env!("CARGO_BIN_EXE_rdma-sm"))
            .args(["--emulated", net.to_str().unwrap(), "--once", "--json"])
            .env("SIM_HOST", host)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let emulated: Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(our_lids(&emulated), our_lids(&on_ibsim), "{}", net.display());
        assert_eq!(our_lfts(&emulated), our_lfts(&on_ibsim), "{}", net.display());
    }
}

/// Stage 4 (§8.4): unmodified opensm manages the emulated fabric through
/// `rdma-fabric ibsim-serve` (ibsim's protocol in front of the emulated
/// SMAs), reaching SUBNET UP with no ERR line, and ibnetdiscover prints the
/// same topology there as on ibsim for the same net file.
#[test]
fn opensm_manages_the_emulated_fabric_and_ibnetdiscover_agrees_with_ibsim() {
    if !have_tools() {
        return;
    }
    let net = Path::new(NETS).join("net.2sw2path4hca");
    let run_opensm = |sock: &str, dir: &Path| {
        run_opensm(sock, dir, "Hca1", &[]);
        std::fs::read_to_string(dir.join("osm.log")).unwrap()
    };
    let discover = |sock: &str, dir: &Path| {
        let o = Command::new("ibnetdiscover")
            .env("IBSIM_SOCKNAME", sock)
            .env("SIM_HOST", "Hca1")
            .env("LD_PRELOAD", SIM)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let mut lines: Vec<String> = String::from_utf8_lossy(&o.stdout)
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(str::to_string)
            .collect();
        lines.sort();
        lines
    };
    // The reference: ibsim itself.
    let sim = Ibsim::start("g", &net);
    run_opensm(&sim.sock, &sim.dir);
    let want = discover(&sim.sock, &sim.dir);
    // The emulated fabric behind ibsim-serve.
    let sock = format!("rsmgw{}", std::process::id());
    let dir = std::env::temp_dir().join(&sock);
    std::fs::create_dir_all(&dir).unwrap();
    let mut server = Command::new(env!("CARGO_BIN_EXE_rdma-fabric"))
        .args(["ibsim-serve", net.to_str().unwrap()])
        .env("IBSIM_SOCKNAME", &sock)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let log = run_opensm(&sock, &dir);
    let got = discover(&sock, &dir);
    let _ = server.kill();
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(log.contains("SUBNET UP"), "{log}");
    let errs: Vec<&str> = log.lines().filter(|l| l.contains("ERR")).collect();
    assert!(errs.is_empty(), "opensm errors: {errs:#?}");
    assert_eq!(got, want, "ibnetdiscover: emulated fabric vs ibsim");
}

/// ibutils' ibdmchk, an independent credit-loop checker (§7), on the LFTs
/// rdma-sm programmed into ibsim for the 5-switch ring: loaded into a fresh
/// ibsim by `opensm -R file -U` (which dumps the subnet and fdbs files
/// ibdmchk reads), they have a credit loop under min-hop and none under
/// Up*/Down*, with full CA-to-CA connectivity; and Up*/Down* changes
/// exactly 4 entries, as opensm's own updn does here (§7).
#[test]
fn ibdmchk_finds_min_hops_credit_loop_and_none_under_updown() {
    if !have_tools() {
        return;
    }
    if !have("ibdmchk") {
        testkit::skip("needs ibutils (ibdmchk)");
        return;
    }
    let net = ring5();
    let mut dumps = Vec::new();
    for (tag, extra) in [("m", &[][..]), ("u", &["--routing", "updn", "--root", "0x200000"][..])] {
        let sim = Ibsim::start(&format!("d{tag}"), &net);
        let v = sim.rdma_sm("H1", extra);
        let lfts = sim.text("H1", "dump_lfts", &[]);
        drop(sim);
        let load = Ibsim::start(&format!("l{tag}"), &net);
        let file = load.dir.join("ours.lfts");
        std::fs::write(&file, &lfts).unwrap();
        run_opensm(&load.sock, &load.dir, "H1", &["-R", "file", "-U", file.to_str().unwrap()]);
        let dump = load.dir.join("dump");
        // opensm loaded exactly our tables.
        let text = std::fs::read_to_string(dump.join("opensm-lfts.dump")).unwrap();
        let mut loaded = HashMap::new();
        for sec in text.split("Unicast lids").skip(1) {
            let guid = hex(sec.split("guid ").nth(1).unwrap().split_whitespace().next().unwrap());
            loaded.insert(guid, parse_lft_lines(sec));
        }
        assert_eq!(loaded, our_lfts(&v), "opensm -R file loaded rdma-sm's LFTs");
        // ibdmchk segfaults after reporting on some inputs: read its text, not its status.
        let o = Command::new("ibdmchk")
            .args(["-s", "opensm-subnet.lst", "-f", "opensm.fdbs", "-m", "opensm.mcfdbs"])
            .current_dir(&dump)
            .output()
            .unwrap();
        let report = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(report.contains("-I- Scanned:20 CA to CA paths"), "{report}");
        dumps.push((report, our_lfts(&v)));
    }
    let (min, updn) = (&dumps[0], &dumps[1]);
    assert!(min.0.contains("-E- credit loops in routing"), "min-hop: {}", min.0);
    assert!(updn.0.contains("-I- no credit loops found"), "updn: {}", updn.0);
    assert!(!updn.0.contains("-E-"), "updn: {}", updn.0);
    let changed: usize =
        min.1.iter().map(|(sw, l)| l.iter().filter(|(lid, p)| updn.1[sw].get(lid) != Some(p)).count()).sum();
    assert_eq!(changed, 4, "LFT entries Up*/Down* changed");
}
