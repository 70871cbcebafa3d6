//! The flags of the KV store examples (`kv`, `kv_cluster`): one definition, flattened
//! into each, so both take the same flags with the same defaults.

use megalon::core::{HostOptions, MemoryKind, PodConfig, WidthPolicy};
use megalon_bench::mix::Mix;

/// The longest run, and the longest wait, in seconds: a year (far below what a
/// `Duration` added to an `Instant` can hold).
pub const MAX_SECONDS: u64 = 365 * 24 * 3600;
/// The most worker threads a host runs (each a thread of the process).
pub const MAX_THREADS: usize = 4096;
/// The most keys: 2^40 (a pod of that many 1 KiB values would be a petabyte).
pub const MAX_KEYS: u64 = 1 << 40;

/// The workload, the hosts' memory and the pod's coherent region.
#[derive(Clone, Debug, clap::Args)]
pub struct KvArgs {
    /// Hosts sharing the pod.
    #[arg(long, default_value_t = 3)]
    pub hosts: u32,
    /// Worker threads per host.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Keys loaded before the run.
    #[arg(long, default_value_t = 100_000)]
    pub keys: u64,
    /// Bytes of every value.
    #[arg(long, default_value_t = 1024)]
    pub value_bytes: usize,
    /// Fraction of operations that are puts (the rest are gets), from 0 to 1.
    #[arg(long, default_value_t = 0.05, allow_negative_numbers = true)]
    pub write_ratio: f64,
    /// Zipfian constant of the key choice, from 0 (uniform keys) up to, not including, 1:
    /// at 0.99 YCSB's scrambled Zipfian, at any other a Zipfian over the keys, its ranks
    /// scattered by a permutation (every key drawn as often as its rank says).
    #[arg(long, default_value_t = 0.99, allow_negative_numbers = true)]
    pub skew: f64,
    /// Seconds of the mixed run.
    #[arg(long, default_value_t = 5.0, allow_negative_numbers = true)]
    pub seconds: f64,
    /// Memory the hosts use: this machine's, with real cache-maintenance instructions; a
    /// simulated non-coherent cache per host (slower; a missing flush shows as a stale
    /// read); or this machine's under the CXL cost model (`cxl`: each access charged what
    /// CXL memory would cost).
    #[arg(long, default_value = "hardware", value_parser = super::memory_kind())]
    pub memory: MemoryKind,
    /// Seed of the key choice and of the simulated memory.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// No progress bars (for logs).
    #[arg(long)]
    pub quiet: bool,
    /// KiB of the pod's coherent region (SCR).
    #[arg(long, default_value_t = 1024)]
    pub scr_kib: u64,
    /// Bits of one coherence record: 2, 4, 8, 16 or 32.
    #[arg(long, default_value_t = 16)]
    pub record_bits: u32,
    /// Local DRAM partitions: an object moves to a host's DRAM after this many
    /// consecutive accesses from it (the paper's n is 5); 0: off.
    #[arg(long, default_value_t = 0)]
    pub local_partitions: u32,
    /// Local copies: a host keeps a copy of a read-shared object after this many reads of
    /// it; 0: off.
    #[arg(long, default_value_t = 0)]
    pub local_copies: u32,
    /// The record width chosen at run time, from `--record-bits`: the hosts' pumps halve
    /// it while puts keep allocating records and double it while they wrap counters. Not
    /// with `--local-partitions`.
    #[arg(long)]
    pub adaptive_width: bool,
}

impl KvArgs {
    /// Refuses flags no run can use, naming the flag and the value given. (Limits of the
    /// pod, such as the most hosts it holds, are the pod's to check: its errors name them.)
    pub fn check(&self) -> Result<(), String> {
        for (flag, value) in [
            ("--hosts", self.hosts as u64),
            ("--threads", self.threads as u64),
            ("--keys", self.keys),
        ] {
            if value == 0 {
                return Err(format!("{flag} 0: at least 1 is needed"));
            }
        }
        if self.threads > MAX_THREADS {
            return Err(format!(
                "--threads {}: at most {MAX_THREADS} a host",
                self.threads
            ));
        }
        if self.keys > MAX_KEYS {
            return Err(format!("--keys {}: at most {MAX_KEYS}", self.keys));
        }
        // Sizes past a u64 of bytes overflowed in `pod_config` (a panic in a debug build,
        // a pod of what the wrap left in a release build).
        if self.scr_kib.checked_mul(1024).is_none() {
            return Err(format!(
                "--scr-kib {}: more bytes than a u64 holds",
                self.scr_kib
            ));
        }
        let max_value_bytes =
            megalon::core::limits::MAX_SLOT_SIZE_BYTES as usize - megalon::kv::LENGTH_PREFIX_BYTES;
        if self.value_bytes > max_value_bytes {
            return Err(format!(
                "--value-bytes {}: at most {max_value_bytes} (the largest slot less the value's length)",
                self.value_bytes
            ));
        }
        if !(0.0..=1.0).contains(&self.write_ratio) {
            return Err(format!(
                "--write-ratio {}: a fraction from 0 to 1 is needed",
                self.write_ratio
            ));
        }
        if !(0.0..1.0).contains(&self.skew) {
            return Err(format!(
                "--skew {}: a Zipfian constant from 0 (uniform) up to, not including, 1 is needed",
                self.skew
            ));
        }
        if !(self.seconds > 0.0 && self.seconds.is_finite()) {
            return Err(format!(
                "--seconds {}: a positive number of seconds is needed",
                self.seconds
            ));
        }
        if self.seconds > MAX_SECONDS as f64 {
            return Err(format!(
                "--seconds {}: at most {MAX_SECONDS} (a year) is supported",
                self.seconds
            ));
        }
        Ok(())
    }

    /// The mix these flags describe, its draws seeded with `--seed`.
    pub fn mix(&self) -> Mix {
        Mix {
            keys: self.keys,
            value_bytes: self.value_bytes,
            write_ratio: self.write_ratio,
            skew: self.skew,
            seed: self.seed,
        }
    }

    /// The pod: [`Mix::pod_config`] with the SCR, record width and local modes asked for.
    pub fn pod_config(&self) -> PodConfig {
        self.mix()
            .pod_config(self.hosts)
            .scr_bytes(self.scr_kib * 1024)
            .record_width_bits(self.record_bits)
            .local_partitions(self.local_partitions)
            .local_copies(self.local_copies)
            .record_width_switch(self.adaptive_width)
    }

    /// The options of host `host`: its memory, and the width policy with
    /// `--adaptive-width`.
    pub fn host_options(&self, host: u32) -> HostOptions {
        let options = HostOptions::new().memory(self.memory_of(host));
        if self.adaptive_width {
            options.width_policy(WidthPolicy::default())
        } else {
            options
        }
    }

    /// The pod's refusal of the configuration these flags made, led by the flag that set
    /// the refused value: the pod names its own parameter (`scr_bytes = 1024 is not a
    /// multiple of 4096` for `--scr-kib 1`), which no flag is called.
    pub fn explain(&self, error: megalon::core::Error) -> Box<dyn std::error::Error> {
        use megalon::core::Error::{
            AboveLimit, BelowMinimum, NotWithWidthSwitch, UnalignedSize, ZeroSize,
        };
        if let NotWithWidthSwitch { .. } = error {
            return format!("--adaptive-width: {error} (not with --local-partitions)").into();
        }
        let parameter = match &error {
            ZeroSize { parameter }
            | UnalignedSize { parameter, .. }
            | AboveLimit { parameter, .. }
            | BelowMinimum { parameter, .. } => *parameter,
            _ => return error.into(),
        };
        let flag = match parameter {
            "scr_bytes" => format!("--scr-kib {}", self.scr_kib),
            "partition_after_accesses" => {
                format!("--local-partitions {}", self.local_partitions)
            }
            "copy_after_reads" => format!("--local-copies {}", self.local_copies),
            _ => return error.into(),
        };
        format!("{flag}: {error}").into()
    }

    /// The memory of host `host`: a simulated cache gets a seed of its own, from `--seed`.
    pub fn memory_of(&self, host: u32) -> MemoryKind {
        self.memory.for_host(self.seed, host)
    }

    /// The workload in words: `100000 keys, 1024 B values, 5% puts, Zipfian keys (skew
    /// 0.99)`.
    pub fn describe_workload(&self) -> String {
        let keys = if self.skew > 0.0 {
            format!("Zipfian keys (skew {})", self.skew)
        } else {
            "uniform keys".to_owned()
        };
        format!(
            "{} keys, {} B values, {}% puts, {keys}",
            self.keys,
            self.value_bytes,
            self.write_ratio * 100.0
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        kv: KvArgs,
    }

    fn parse(args: &[&str]) -> Result<KvArgs, String> {
        let flags: Flags = super::super::parse_flags(args).map_err(|e| e.to_string())?;
        flags.kv.check()?;
        Ok(flags.kv)
    }

    #[test]
    fn the_defaults_pass_their_own_check() {
        let kv = parse(&[]).unwrap();
        assert_eq!((kv.hosts, kv.threads, kv.keys), (3, 2, 100_000));
        assert_eq!(kv.memory, MemoryKind::Hardware);
        assert_eq!(
            kv.describe_workload(),
            "100000 keys, 1024 B values, 5% puts, Zipfian keys (skew 0.99)"
        );
    }

    #[test]
    fn negative_numbers_are_values_and_refused_by_name() {
        for (flags, refusal) in [
            (
                ["--skew", "-1"],
                "--skew -1: a Zipfian constant from 0 (uniform) up to, not including, 1 is needed",
            ),
            (
                ["--write-ratio", "-0.5"],
                "--write-ratio -0.5: a fraction from 0 to 1 is needed",
            ),
            (
                ["--seconds", "-2"],
                "--seconds -2: a positive number of seconds is needed",
            ),
            (["--threads", "0"], "--threads 0: at least 1 is needed"),
            (
                ["--threads", "100000"],
                "--threads 100000: at most 4096 a host",
            ),
            (
                ["--keys", "18446744073709551615"],
                "--keys 18446744073709551615: at most 1099511627776",
            ),
        ] {
            assert_eq!(parse(&flags).unwrap_err(), refusal, "{flags:?}");
        }
        assert!(parse(&["--skew", "1"]).is_err());
        assert!(parse(&["--skew", "0"]).is_ok());
    }

    /// Sizes past what a u64 of bytes holds: `--scr-kib` times 1024 and `--value-bytes`
    /// plus the length prefix overflowed (a panic in a debug build; in a release build a
    /// pod of whatever the wrap left, 2^54 + 1024 KiB being 1 MiB, without a word).
    #[test]
    fn sizes_past_a_u64_of_bytes_are_refused_by_name() {
        for (flags, flag) in [
            (["--scr-kib", "18014398509481985"], "--scr-kib"),
            (["--value-bytes", "18446744073709551615"], "--value-bytes"),
        ] {
            let checked = std::panic::catch_unwind(|| parse(&flags).map(|kv| kv.pod_config()));
            match checked {
                Ok(Err(refusal)) => assert!(refusal.starts_with(flag), "{refusal}"),
                Ok(Ok(config)) => panic!("{flags:?} accepted: {config:?}"),
                Err(_) => panic!("{flags:?} panicked"),
            }
        }
    }

    #[test]
    fn simulated_hosts_get_seeds_of_their_own() {
        let kv = parse(&["--memory", "simulated", "--seed", "9"]).unwrap();
        assert_ne!(kv.memory_of(0), kv.memory_of(1));
        assert_eq!(
            kv.memory_of(1),
            MemoryKind::Simulated(Default::default()).for_host(9, 1)
        );
    }
}
