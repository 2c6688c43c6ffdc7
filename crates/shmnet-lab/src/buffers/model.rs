//! Seed 003's cost model, equations (1)–(6), for a machine described by [`Params`]: this one
//! (per-line costs calibrated here, in TSC ticks per 64-byte line) or the seed's Unity
//! (cycles per 32-byte line, from the paper).
//!
//! The seed writes `BC_ur`, `BC_uw` for reading and writing the application's buffer U; with
//! U in the cache they are `L_n × C_br` and `L_n × C_bw`, which is how they are evaluated
//! here. The seed omits the write-back of dirty lines; so does the model (the report says
//! where that shows). Beyond the seed, [`Mode::Ch`]'s per-line clean (x86's `clflushopt`,
//! which Unity did not have) is modelled as `L_n × C_fl`, `C_fl` the measured cost of
//! cleaning one line of K.

use super::coherence::Mode;

/// Which way the packet goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Direction {
    /// Application → device.
    Send,
    /// Device → application.
    Receive,
}

impl Direction {
    /// Both, in the report's order.
    pub const BOTH: [Direction; 2] = [Direction::Send, Direction::Receive];

    /// The name the report uses.
    pub fn name(self) -> &'static str {
        match self {
            Direction::Send => "send",
            Direction::Receive => "receive",
        }
    }
}

/// One machine's parameters, in its own units (per line, of its line size).
#[derive(Clone, Copy, Debug, serde::Serialize)]
pub struct Params {
    /// Bytes per line (the unit of `L_n`).
    pub line: usize,
    /// `C_br`: reading a line in the cache.
    pub c_br: f64,
    /// `C_bw`: writing a line in the cache.
    pub c_bw: f64,
    /// `C_cr`: reading a line bypassing the cache (from memory).
    pub c_cr: f64,
    /// `C_cw`: writing a line bypassing the cache.
    pub c_cw: f64,
    /// `C_fl`: cleaning one line of K (not in the seed; Unity had no per-line clean).
    pub c_fl: f64,
    /// `CL_total`: lines in the data cache a whole-cache clean walks.
    pub cl_total: f64,
    /// `C_way`: the data cache's associativity.
    pub c_way: f64,
    /// The largest frame, bytes (`L_max` is its lines plus one).
    pub max_frame: usize,
}

impl Params {
    /// The seed's Unity, from its section IV.A: 32-byte lines, C_br 22, C_bw 12, C_cr 105,
    /// C_cw 48 cycles, 4 ways. The paper does not give the data cache's size: 16 KiB (512
    /// lines), the usual size of a UniCore-32 data cache of its time, is assumed; nor a
    /// per-line clean, which it did not have (`c_fl` is NaN: its CH is the whole-cache one).
    pub fn unity() -> Self {
        Self {
            line: 32,
            c_br: 22.0,
            c_bw: 12.0,
            c_cr: 105.0,
            c_cw: 48.0,
            c_fl: f64::NAN,
            cl_total: 512.0,
            c_way: 4.0,
            max_frame: 1536,
        }
    }

    /// `L_n = ⌈S / line⌉ + 1`: lines a buffer of `bytes` spans, at worst.
    pub fn lines(&self, bytes: usize) -> f64 {
        (bytes.div_ceil(self.line) + 1) as f64
    }

    /// `L_max`.
    pub fn l_max(&self) -> f64 {
        self.lines(self.max_frame)
    }

    /// What equations (1)–(6) predict for one packet of `bytes` at dirty ratio `dirty`
    /// (0 to 1), in the machine's unit.
    pub fn predict(&self, dir: Direction, mode: Mode, bytes: usize, dirty: f64) -> f64 {
        let ln = self.lines(bytes);
        let bc_ur = ln * self.c_br;
        let bc_uw = ln * self.c_bw;
        let whole_clean = self.cl_total * dirty * self.c_bw;
        match (dir, mode) {
            // (1): BC_ur + L_n C_br + CL_total R_d C_bw
            (Direction::Send, Mode::ChAll) => bc_ur + ln * self.c_br + whole_clean,
            (Direction::Send, Mode::Ch) => bc_ur + ln * self.c_br + ln * self.c_fl,
            // (2): BC_ur + L_n C_br (1 + C_way)
            (Direction::Send, Mode::Cs) => bc_ur + ln * self.c_br * (1.0 + self.c_way),
            // (3): BC_ur + L_n C_cw
            (Direction::Send, Mode::Nc) => bc_ur + ln * self.c_cw,
            // (4): L_n C_br + CL_total R_d C_bw + BC_ur + BC_uw
            (Direction::Receive, Mode::ChAll) => ln * self.c_br + whole_clean + bc_ur + bc_uw,
            (Direction::Receive, Mode::Ch) => ln * self.c_fl + ln * self.c_br + bc_ur + bc_uw,
            // (5): (L_n + C_way L_max) C_br + BC_ur + BC_uw
            (Direction::Receive, Mode::Cs) => {
                (ln + self.c_way * self.l_max()) * self.c_br + bc_ur + bc_uw
            }
            // (6): L_n C_cr + BC_ur + BC_uw
            (Direction::Receive, Mode::Nc) => ln * self.c_cr + bc_ur + bc_uw,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seed's own conclusions follow from its equations on its parameters: NC beats CS
    /// on send at every size, and on receive for every Ethernet frame (the seed's "CS reads
    /// much more data" holds while `L_n (C_cr − C_br) < C_way L_max C_br`, 52 lines: beyond
    /// 1,600 bytes CS's fixed junk read costs less than NC's slow reads); on send NC beats
    /// CH once a quarter of the cache is dirty; on receive CH wins at large sizes when
    /// little is dirty.
    #[test]
    fn the_seeds_equations_on_its_machine_say_what_the_seed_says() {
        let u = Params::unity();
        for dirty in [0.0, 0.0625, 0.25, 0.5, 1.0] {
            for bytes in [64, 512, 1500, 9000, 65_536] {
                let send = |m| u.predict(Direction::Send, m, bytes, dirty);
                assert!(send(Mode::Nc) < send(Mode::Cs), "send {bytes} {dirty}");
            }
            for bytes in [64, 512, 1500] {
                let recv = |m| u.predict(Direction::Receive, m, bytes, dirty);
                assert!(recv(Mode::Nc) < recv(Mode::Cs), "receive {bytes} {dirty}");
            }
            let recv = |m| u.predict(Direction::Receive, m, 9000, dirty);
            assert!(recv(Mode::Nc) > recv(Mode::Cs), "receive 9000 {dirty}");
        }
        // Send, 1,500 B (L_n = 48), 6.25 % dirty: (1) 48·22 + 48·22 + 512·0.0625·12 = 2,496
        // against (3) 48·22 + 48·48 = 3,360 — CH still wins at 6.25 %; at 25 % (1) is 3,648.
        let ch = u.predict(Direction::Send, Mode::ChAll, 1500, 0.0625);
        assert!((ch - 2496.0).abs() < 1e-9, "{ch}");
        assert!(
            u.predict(Direction::Send, Mode::Nc, 1500, 0.25)
                < u.predict(Direction::Send, Mode::ChAll, 1500, 0.25)
        );
        // Receive, 9,000 B, clean cache: NC's 105-cycle reads lose to CH.
        assert!(
            u.predict(Direction::Receive, Mode::Nc, 9000, 0.0)
                > u.predict(Direction::Receive, Mode::ChAll, 9000, 0.0)
        );
        // Receive, 64 B, half dirty: NC wins.
        assert!(
            u.predict(Direction::Receive, Mode::Nc, 64, 0.5)
                < u.predict(Direction::Receive, Mode::ChAll, 64, 0.5)
        );
    }

    #[test]
    fn lines_count_the_worst_alignment() {
        let u = Params::unity();
        assert_eq!(u.lines(0), 1.0);
        assert_eq!(u.lines(32), 2.0);
        assert_eq!(u.lines(33), 3.0);
        assert_eq!(u.l_max(), 49.0);
    }
}
