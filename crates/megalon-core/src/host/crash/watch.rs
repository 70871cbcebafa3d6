//! Telling a dead host: the heartbeat a host bumps, and the watch each pump keeps over
//! the others (the process check, the lease), which starts their recovery.

use std::time::{Duration, Instant};

use super::{Dead, Step, Watch};
use crate::error::Error;
use crate::host::Shared;
use crate::host_table;
use crate::ids::HostId;

impl Shared {
    /// Bumps this host's heartbeat (its lease), unless a recoverer condemned it: a
    /// recovery that stops half-way (a live host's hole in the log, a recoverer that
    /// dies) is begun again only by a watcher that finds the host dead, and a watcher
    /// finds a host on another machine dead only once its heartbeat has stood still for a
    /// lease.
    pub(in crate::host) fn beat(&self) {
        // Nor once it knows it is dead (its pump panicked, or it applied its own death):
        // a thread still in a wait must not keep it alive past its lease.
        if !self.is_declared_dead() && !host_table::condemned(&self.pod, self.id, self.life) {
            self.chaos.point(crate::chaos::Point::BeatAfterCheck);
            host_table::heartbeat(&self.pod, self.id, self.life);
        }
    }

    /// The pump's watch: every quarter lease, looks for hosts that died and recovers
    /// them. Errors are the pump's background errors; recovery is tried again later.
    pub(in crate::host) fn watch_hosts(&self) {
        for dead in self.dead_hosts_due(|watch| &mut watch.next) {
            let (host, life) = (dead.host, dead.joins);
            if let Err(error) = self.recover(dead, Step::Whole) {
                self.background_error(Error::RecoveryStopped {
                    host,
                    life,
                    cause: Box::new(error),
                });
            }
        }
    }

    /// For a replay stalled on an unpublished position, or an append waiting for room in
    /// the log (they hold the replay or append lock, so the pump may not recover now):
    /// every quarter lease, fills what dead hosts reserved and lets the head pass them.
    pub(in crate::host) fn unblock_log(&self) {
        for dead in self.dead_hosts_due(|watch| &mut watch.next_fill) {
            let (host, life) = (dead.host, dead.joins);
            if let Err(error) = self.recover(dead, Step::Reservation) {
                self.background_error(Error::RecoveryStopped {
                    host,
                    life,
                    cause: Box::new(error),
                });
            }
        }
    }

    /// The dead hosts, if the timer `next` says it is time to look (then set again).
    fn dead_hosts_due(&self, next: impl Fn(&mut Watch) -> &mut Option<Instant>) -> Vec<Dead> {
        let lease = Duration::from_millis(u64::from(self.pod.config().lease_ms));
        let now = Instant::now();
        let mut watch = self.watch.lock();
        let due = next(&mut watch);
        if due.is_some_and(|due| now < due) {
            return Vec::new();
        }
        *due = Some(now + lease / 4);
        let mut dead = self.find_dead(&mut watch, now, lease);
        let all: Vec<(HostId, u32, u64)> = dead.iter().map(|d| (d.host, d.pid, d.joins)).collect();
        for d in &mut dead {
            d.others_dead.clone_from(&all);
        }
        dead
    }

    fn find_dead(&self, watch: &mut Watch, now: Instant, lease: Duration) -> Vec<Dead> {
        let mut dead = Vec::new();
        for host in 0..self.pod.config().max_hosts {
            if host == self.id {
                continue;
            }
            let Some((pid, joins)) = host_table::holder(&self.pod, host) else {
                watch.seen.remove(&host);
                continue;
            };
            let gone = match host_table::process_gone(&self.pod, host, pid, joins) {
                Some(gone) => gone,
                None => {
                    let beat = host_table::heartbeat_count(&self.pod, host);
                    let seen = watch.seen.entry(host).or_insert((pid, joins, beat, now));
                    if (seen.0, seen.1, seen.2) != (pid, joins, beat) {
                        *seen = (pid, joins, beat, now);
                    }
                    now.duration_since(seen.3) > lease
                }
            };
            if gone {
                dead.push(Dead {
                    host,
                    pid,
                    joins,
                    others_dead: Vec::new(),
                    rescue: false,
                    reserved: 0..0,
                });
            }
        }
        dead
    }
}
