//! `--numa`: the paper's emulation on a machine with several NUMA nodes. The pod's memory
//! is bound to the first node (the "CXL device"); host `h`'s threads run on the CPUs of
//! another node, hosts spread round robin over the nodes after the first.

use std::fs;

/// Where the pod and each host go, or why they cannot.
#[derive(Clone, Debug)]
pub struct Placement {
    /// The pod's node.
    pub pod_node: u32,
    /// The CPUs of each host node, in host order modulo their count.
    host_cpus: Vec<Vec<usize>>,
}

impl Placement {
    /// The placement on this machine, or a sentence saying why there is none.
    pub fn detect() -> Result<Placement, String> {
        let nodes = megalon_core::numa_nodes();
        if nodes.len() < 2 {
            return Err(format!(
                "this machine has {} NUMA node{}: --numa needs at least 2 (one for the pod, \
                 one or more for the hosts); running unpinned",
                nodes.len(),
                if nodes.len() == 1 { "" } else { "s" }
            ));
        }
        let mut host_cpus = Vec::new();
        for node in &nodes[1..] {
            let path = format!("/sys/devices/system/node/node{node}/cpulist");
            let list = fs::read_to_string(&path).map_err(|e| format!("{path}: {e}"))?;
            let cpus =
                parse_cpu_list(&list).ok_or_else(|| format!("{path}: cannot parse {list:?}"))?;
            if !cpus.is_empty() {
                host_cpus.push(cpus);
            }
        }
        if host_cpus.is_empty() {
            return Err("no NUMA node after the first has CPUs; running unpinned".into());
        }
        Ok(Placement {
            pod_node: nodes[0],
            host_cpus,
        })
    }

    /// Pins the calling thread to host `host`'s CPUs.
    pub fn pin(&self, host: usize) {
        let cpus = &self.host_cpus[host % self.host_cpus.len()];
        // SAFETY: `set` is a plain bit set, zeroed then filled with CPU numbers below
        // CPU_SETSIZE; sched_setaffinity(0, ...) applies it to the calling thread only.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            for &cpu in cpus {
                if cpu < libc::CPU_SETSIZE as usize {
                    libc::CPU_SET(cpu, &mut set);
                }
            }
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        }
    }

    /// One line for the report.
    pub fn describe(&self) -> String {
        format!(
            "pod on NUMA node {}, hosts on {} node(s) of {} CPUs each",
            self.pod_node,
            self.host_cpus.len(),
            self.host_cpus.first().map_or(0, Vec::len)
        )
    }
}

/// `0-3,8,10-11` into CPU numbers.
fn parse_cpu_list(list: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in list.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi): (usize, usize) = (lo.parse().ok()?, hi.parse().ok()?);
                cpus.extend(lo..=hi);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    Some(cpus)
}

#[cfg(test)]
mod tests {
    use super::parse_cpu_list;

    #[test]
    fn cpu_lists_parse() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpu_list(""), Some(vec![]));
        assert_eq!(parse_cpu_list("x"), None);
    }
}
