//! DCQCN parameters and named presets (§1.5 of the reference, sources there).
//!
//! | field | paper (§1.3, §1.5 a) | NVIDIA firmware (§1.4, §1.5 b) | HPCC `run.py dcqcn` (§1.5 c, §2.2) |
//! |---|---|---|---|
//! | `variant` | `Paper` | `Nvidia` | `Nvidia` |
//! | `min_rate_bps` | none given: 1 Mb/s | `rpg_min_rate` 1 Mb/s | `MIN_RATE` 100 Mb/s |
//! | `g` | 1/256 | `dce_tcp_g` 1019 → g = 5/1024 | `EWMA_GAIN` 1/256 |
//! | `initial_alpha` | 1 | `initial_alpha_value` 1023/1024 | 1 |
//! | `alpha_interval` (K) | 55 µs | `dce_tcp_rtt` 1 µs | 1 µs |
//! | `rate_decrease_interval` | unused (cut per CNP) | `rate_reduce_monitor_period` 4 µs | 4 µs |
//! | `rate_increase_interval` (T) | 55 µs | `rpg_time_reset` 300 µs | `RP_TIMER` 300 µs |
//! | `byte_counter` (B) | 10 MB | off (`rpg_byte_reset` 32767: use unclear) | off |
//! | `fast_recovery_steps` (F) | 5 | `rpg_threshold` 1 | 1 |
//! | `ai_rate_bps` | 40 Mb/s | `rpg_ai_rate` 5 Mb/s | line/5000 (20 Mb/s at 100G) |
//! | `hai_rate_bps` | 200 Mb/s (ns3-rdma) | `rpg_hai_rate` 50 Mb/s | line/500 (200 Mb/s at 100G) |
//! | `cut_shift` | 1 (α/2) | `rpg_gd` 11 on α/1024 → 1 | 1 |
//! | `min_dec_factor_pct` | 50 | `rpg_min_dec_fac` 50 | 50 |
//! | `clamp_target_rate` | (RT ← RC on every CNP) | `clamp_tgt_rate` 0 | 0 |
//! | `clamp_target_after_time_inc` | — | `clamp_tgt_rate_after_time_inc` 1 | 1 (hard-coded) |
//! | `rate_on_first_cnp_bps` | keep | `rate_to_set_on_first_cnp` 0: keep (see below) | 1.0 × current: keep |
//! | `np_mode` | `Deferred` (htsim) | `Suppress` | `Suppress` |
//! | `cnp_interval` (N) | 50 µs | `np_min_time_between_cnps` 4 µs (0/2/4 seen) | 0 (CNP flag on every ACK) |
//! | `cnp_dscp` / `cnp_prio` | 48 / 6 | `np_cnp_dscp` 48 / `np_cnp_prio` 6 | 48 / 6 |
//!
//! The paper gives no floor and no CNP priority; we borrow NVIDIA's. The
//! reference does not say what firmware's `rate_to_set_on_first_cnp = 0`
//! means; a flow gets its first CNP at line rate, so keeping the current
//! rate (HPCC's reading) is what the presets do. Paper values are for 40G
//! and are kept absolute at every line rate (§5 pitfall 8 says they do not
//! scale; choose parameters per study).

use core::time::Duration;

use super::fixed::{Alpha, Gain};

/// Which reaction-point algorithm runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RpVariant {
    /// Zhu et al. 2015 as htsim's `dcqcn.cc` (§1.3): cut on every CNP with
    /// the old α, byte counter, hyper increase i·R_HAI.
    Paper,
    /// NVIDIA CX-4+ as HPCC's `rdma-hw.cc` models it (§1.4): α on a periodic
    /// timer with binary feedback, at most one cut per decrease period,
    /// constant R_HAI, no byte counter.
    Nvidia,
}

/// How the notification point treats CE marks inside the CNP interval (§1.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NpMode {
    /// The paper and htsim: a mark inside the interval is answered by one
    /// CNP when the interval ends.
    Deferred,
    /// NVIDIA `np_min_time_between_cnps`: marks inside the interval get no CNP.
    Suppress,
}

/// Every DCQCN knob of one port. Rates in bits per second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DcqcnParams {
    pub variant: RpVariant,
    /// The ceiling of the current and the target rate (`rpg_max_rate` 0 = line).
    pub line_rate_bps: u64,
    /// The floor of the current rate (`rpg_min_rate`).
    pub min_rate_bps: u64,
    /// EWMA gain of α.
    pub g: Gain,
    /// α at flow start (paper) or on the first CNP (NVIDIA).
    pub initial_alpha: Alpha,
    /// K: α decays once per period without CNPs (NVIDIA: the α timer period).
    pub alpha_interval: Duration,
    /// NVIDIA only: CNPs are acted on at most once per this period.
    pub rate_decrease_interval: Duration,
    /// T: one timer increase per period.
    pub rate_increase_interval: Duration,
    /// B: one byte-counter increase per this many bytes sent; 0 = off. Paper only.
    pub byte_counter: u64,
    /// F: the number of fast-recovery steps.
    pub fast_recovery_steps: u32,
    /// R_AI.
    pub ai_rate_bps: u64,
    /// R_HAI.
    pub hai_rate_bps: u64,
    /// A cut removes α / 2^cut_shift of the rate (1 = the paper's α/2).
    pub cut_shift: u32,
    /// A cut keeps at least this percentage of the rate (`rpg_min_dec_fac`).
    pub min_dec_factor_pct: u8,
    /// NVIDIA: the target follows the rate on every cut.
    pub clamp_target_rate: bool,
    /// NVIDIA: ... or only when a timer increase happened since the last cut.
    pub clamp_target_after_time_inc: bool,
    /// NVIDIA: rate and target on the first CNP; `None` keeps the current rate.
    pub rate_on_first_cnp_bps: Option<u64>,
    pub np_mode: NpMode,
    /// N: at most one CNP per QP per this interval; zero answers every mark.
    pub cnp_interval: Duration,
    /// DSCP of CNPs, so they overtake the congested class (§5 pitfall 5).
    pub cnp_dscp: u8,
    /// 802.1p priority of CNPs.
    pub cnp_prio: u8,
    /// Credit a QP's pacer may keep when its sender comes late or idles, as
    /// link time at the current rate. Zero (the presets) paces exactly, as
    /// a simulation's timers fire on time; over real sockets, where wake-ups
    /// come tens of microseconds late, zero loses that time on every packet,
    /// and a few hundred µs lets a late sender catch up (`rdma-perf --dcqcn`).
    pub pacer_burst: Duration,
}

const MBPS: u64 = 1_000_000;

impl DcqcnParams {
    /// Zhu et al. (SIGCOMM 2015), §1.3 and §1.5 column (a).
    pub const fn paper(line_rate_bps: u64) -> DcqcnParams {
        DcqcnParams {
            variant: RpVariant::Paper,
            line_rate_bps,
            min_rate_bps: MBPS,
            g: Gain::new(1, 256),
            initial_alpha: Alpha::ONE,
            alpha_interval: Duration::from_micros(55),
            rate_decrease_interval: Duration::ZERO,
            rate_increase_interval: Duration::from_micros(55),
            byte_counter: 10_000_000,
            fast_recovery_steps: 5,
            ai_rate_bps: 40 * MBPS,
            hai_rate_bps: 200 * MBPS,
            cut_shift: 1,
            min_dec_factor_pct: 50,
            clamp_target_rate: false,
            clamp_target_after_time_inc: false,
            rate_on_first_cnp_bps: None,
            np_mode: NpMode::Deferred,
            cnp_interval: Duration::from_micros(50),
            cnp_dscp: 48,
            cnp_prio: 6,
            pacer_burst: Duration::ZERO,
        }
    }

    /// NVIDIA CX-4+ firmware defaults (`rp_*`/`np_*`), §1.4 and §1.5 column (b).
    pub const fn nvidia(line_rate_bps: u64) -> DcqcnParams {
        DcqcnParams {
            variant: RpVariant::Nvidia,
            line_rate_bps,
            min_rate_bps: MBPS,
            g: Gain::new(1024 - 1019, 1024),
            initial_alpha: Alpha::from_ratio(1023, 1024),
            alpha_interval: Duration::from_micros(1),
            rate_decrease_interval: Duration::from_micros(4),
            rate_increase_interval: Duration::from_micros(300),
            byte_counter: 0,
            fast_recovery_steps: 1,
            ai_rate_bps: 5 * MBPS,
            hai_rate_bps: 50 * MBPS,
            cut_shift: 1,
            min_dec_factor_pct: 50,
            clamp_target_rate: false,
            clamp_target_after_time_inc: true,
            rate_on_first_cnp_bps: None,
            np_mode: NpMode::Suppress,
            cnp_interval: Duration::from_micros(4),
            cnp_dscp: 48,
            cnp_prio: 6,
            pacer_burst: Duration::ZERO,
        }
    }

    /// HPCC's ns-3 model, `run.py` mode `dcqcn` (§1.5 column (c)); the
    /// settings of the §2.2 trajectory. R_AI and R_HAI scale with the line rate.
    pub const fn hpcc(line_rate_bps: u64) -> DcqcnParams {
        DcqcnParams {
            g: Gain::new(1, 256),
            initial_alpha: Alpha::ONE,
            min_rate_bps: 100 * MBPS,
            ai_rate_bps: line_rate_bps / 5000,
            hai_rate_bps: line_rate_bps / 500,
            cnp_interval: Duration::ZERO,
            ..DcqcnParams::nvidia(line_rate_bps)
        }
    }

    /// The floor, never above the line rate (so the clamp range is never empty).
    pub(crate) fn floor_bps(&self) -> u64 {
        self.min_rate_bps.max(1).min(self.line_rate_bps.max(1))
    }

    /// The ceiling, at least 1 b/s.
    pub(crate) fn ceiling_bps(&self) -> u64 {
        self.line_rate_bps.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_carry_their_sources_values() {
        let p = DcqcnParams::paper(40_000_000_000);
        assert_eq!((p.fast_recovery_steps, p.g, p.ai_rate_bps), (5, Gain::new(1, 256), 40_000_000));
        let n = DcqcnParams::nvidia(100_000_000_000);
        assert_eq!(n.g, Gain::new(5, 1024));
        assert_eq!(n.initial_alpha.raw(), 1023u64 << 22);
        let h = DcqcnParams::hpcc(100_000_000_000);
        assert_eq!((h.ai_rate_bps, h.hai_rate_bps, h.min_rate_bps), (20_000_000, 200_000_000, 100_000_000));
        assert_eq!(h.rate_increase_interval, Duration::from_micros(300));
    }
}
