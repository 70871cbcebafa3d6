//! Flags shared by the KV store examples (`kv`, `kv_cluster`).

use megalon::core::PodConfig;
use megalon_kv::mix::Mix;

/// The workload and the pod's coherent region.
#[derive(Clone, Debug, clap::Args)]
pub struct MixArgs {
    /// Hosts sharing the pod.
    #[arg(long, default_value_t = 3)]
    pub hosts: usize,
    /// Worker threads per host.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Keys loaded before the run.
    #[arg(long, default_value_t = 100_000)]
    pub keys: u64,
    /// Bytes of every value.
    #[arg(long, default_value_t = 1024)]
    pub value_bytes: usize,
    /// Fraction of operations that are puts (the rest are gets).
    #[arg(long, default_value_t = 0.05)]
    pub write_ratio: f64,
    /// Zipfian skew of the key choice (YCSB's scrambled Zipfian); 0 for uniform.
    #[arg(long, default_value_t = 0.99)]
    pub skew: f64,
    /// Seconds of the mixed run.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// KiB of the pod's coherent region (SCR).
    #[arg(long, default_value_t = 1024)]
    pub scr_kib: u64,
    /// Bits of one coherence record: 8, 16 or 32.
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
}

impl MixArgs {
    /// Refuses flags no run can use.
    pub fn check(&self) -> Result<(), String> {
        if self.hosts == 0 || self.threads == 0 || self.keys == 0 {
            return Err("--hosts, --threads and --keys must be at least 1".into());
        }
        if !(0.0..=1.0).contains(&self.write_ratio) {
            return Err("--write-ratio is a fraction between 0 and 1".into());
        }
        Ok(())
    }

    /// The mix these flags describe, its draws seeded with `seed`.
    pub fn mix(&self, seed: u64) -> Mix {
        Mix {
            keys: self.keys,
            value_bytes: self.value_bytes,
            write_ratio: self.write_ratio,
            skew: self.skew,
            seed,
        }
    }

    /// The pod: [`Mix::pod_config`] with the SCR and record width asked for.
    pub fn pod_config(&self) -> PodConfig {
        self.mix(0)
            .pod_config(self.hosts as u32)
            .scr_bytes(self.scr_kib * 1024)
            .record_width_bits(self.record_bits)
            .local_partitions(self.local_partitions)
            .local_copies(self.local_copies)
    }
}
