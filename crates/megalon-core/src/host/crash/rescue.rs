//! A joiner that finds every host of the pod dead: it takes a dead holder's row over and
//! recovers that life (and the rest of the dead) before its own join completes.

use std::time::{Duration, Instant};

use super::{Dead, Step};
use crate::error::{Error, JoinNotServedCause, Result};
use crate::host::{DeadRow, Shared};
use crate::host_table;
use crate::ids::HostId;
use crate::log::Log;
use crate::sync::Ordering;

impl Shared {
    /// Recovers life `joins` of this host's id (process `pid`), whose row this host
    /// took over (`host::rescue`), with every other host of the pod found dead with it
    /// (`others`, as `(id, pid, life, heartbeat, since)`: since when the joiner saw it
    /// unchanged). Before anything else of this life's: its own first append is the
    /// `HostDead` of the dead one. Bounded by the wait limit: if the recovery could not
    /// finish in it, `Err(RecoveryStopped)` when its last round stopped on an error,
    /// `Err(JoinNotServed)` when it waited (another recovery holds the word, say).
    pub(in crate::host) fn rescue(&self, pid: u32, joins: u64, others: &[DeadRow]) -> Result<()> {
        {
            // What the joiner saw counts for this host's watch: a stalled replay fills the
            // other dead hosts' holes at once, without a lease of its own.
            let mut watch = self.watch.lock();
            for &(host, pid, life, beat, since) in others {
                watch.seen.insert(host, (pid, life, beat, since));
            }
        }
        // The others found dead, as they still look now: a holder only paused that beat
        // again since the joiner's look lives (an ordinary watch looks again each round),
        // and is neither condemned nor has its announces taken for the dead's here.
        let still_dead = || {
            let mut all: Vec<(HostId, u32, u64)> = others
                .iter()
                .filter(|&&(host, pid, life, beat, _)| {
                    host_table::holder(&self.pod, host) == Some((pid, life))
                        && host_table::heartbeat_count(&self.pod, host) == beat
                })
                .map(|&(host, pid, life, ..)| (host, pid, life))
                .collect();
            all.push((self.id, pid, joins));
            all
        };
        let mut dead = Dead {
            host: self.id,
            pid,
            joins,
            others_dead: still_dead(),
            rescue: true,
            reserved: host_table::reservation_up_to(&self.pod, self.id, self.life - 1),
        };
        let stopped = |cause: Error| Error::RecoveryStopped {
            host: self.id,
            life: joins,
            cause: Box::new(cause),
        };
        self.close_reservation(dead.reserved.clone())
            .map_err(stopped)?;
        let started = Instant::now();
        // As often as a pump's watch (every quarter lease): what a round waits for is
        // another rescue's, and each round may append (its `Recovered` events).
        let lease = Duration::from_millis(u64::from(self.pod.config().lease_ms));
        loop {
            self.beat();
            dead.others_dead = still_dead();
            // A round that stopped on an error (an append refused or left unconfirmed, a
            // full log) is begun again, as a pump's watch does, within the wait limit: a
            // join that gave up at the first left the pod to the next joiner, a lease
            // later. Not once this host lost the row it rescues (taken over in turn).
            let last_error = match self.recover(dead.clone(), Step::Whole) {
                Ok(true) => return Ok(()),
                Ok(false) => None,
                Err(error @ Error::HostDeclaredDead { .. }) => return Err(stopped(error)),
                Err(error) => Some(error),
            };
            let waited = started.elapsed();
            if waited >= self.options.wait_limit {
                return Err(match last_error {
                    Some(error) => stopped(error),
                    None => Error::JoinNotServed {
                        host: self.id,
                        waited_ms: waited.as_millis() as u64,
                        cause: JoinNotServedCause::RescueUnfinished,
                    },
                });
            }
            let left = self.options.wait_limit - waited;
            std::thread::sleep((lease / 4).min(left));
        }
    }

    /// Before a rescuer's first append: makes sure the earlier life it took over can no
    /// longer reserve the positions it announced (`reserved`). That life announced them
    /// before its `tail` CAS and may be only paused between the two: if `tail` is still
    /// where its announce begins, its CAS could win after our fill looked at the tail
    /// and leave a hole below our own entries that no recovery would fill (the row's
    /// words are ours by then, and no watch looks at its own row). So we reserve them
    /// ourselves, announced in our words as any append's, and publish `Skip`s there: its
    /// CAS fails, and its next announce finds the row taken. Otherwise its positions are
    /// below `tail` (reserved, by it or by nobody's CAS from there), and the fill handles
    /// them. `Err(HostDeclaredDead)`: our row was taken over in turn.
    fn close_reservation(&self, reserved: std::ops::Range<u64>) -> Result<()> {
        if reserved.is_empty() {
            return Ok(());
        }
        let _appending = self.append_lock.lock();
        let tail = Log::tail(&self.pod);
        // Room: its own check found it before its announce, and the head never goes back.
        if tail.load(Ordering::SeqCst) != reserved.start
            || reserved.end > Log::head(&self.pod) + self.log.capacity()
        {
            return Ok(());
        }
        if !host_table::announce_reservation(
            &self.pod,
            self.id,
            self.life,
            reserved.start,
            reserved.end,
        ) {
            return Err(Error::HostDeclaredDead {
                host: self.id,
                life: self.life,
            });
        }
        if tail
            .compare_exchange(
                reserved.start,
                reserved.end,
                Ordering::SeqCst,
                Ordering::SeqCst,
            )
            .is_ok()
        {
            // The lease's rule, as every append's: ours, right before the writes (else
            // they stay announced, for our recoverer to fill).
            self.holds_its_row()?;
            let entry = self.skip_entry(self.id);
            for position in reserved.clone() {
                self.log.write(&self.memory, position, &entry);
            }
        }
        host_table::withdraw_reservation(&self.pod, self.id, self.life, reserved.end);
        Ok(())
    }
}
