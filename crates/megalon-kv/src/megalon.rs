//! megalon's object protocol as a [`Scheme`]: one pod, the hosts of it this process runs,
//! a handle per thread on one of them.

use std::sync::Arc;

use megalon_core::{EventCounts, Host, HostOptions, Join, Pod};

use crate::error::{Error, Result};
use crate::scheme::{Extent, Limits, Report, Scheme, SchemeHandle};

/// megalon: a node-replicated index fed by the shared log, coherence records only for
/// objects that are written.
pub struct Megalon {
    pod: Arc<Pod>,
    hosts: Vec<Arc<Host>>,
}

impl Megalon {
    /// The scheme over `hosts`, which joined `pod`.
    ///
    /// # Panics
    /// If a host joined another pod (see [`Megalon::try_new`]): in every build, since the
    /// scheme's limits are `pod`'s, and a value within them but past a host's slot would
    /// fail deep inside a held update.
    pub fn new(pod: Arc<Pod>, hosts: Vec<Arc<Host>>) -> Self {
        match Self::try_new(pod, hosts) {
            Ok(scheme) => scheme,
            Err(error) => panic!("Megalon::new: {error}"),
        }
    }

    /// The scheme over `hosts`, or [`Error::HostOfAnotherPod`] if one did not join `pod`.
    pub fn try_new(pod: Arc<Pod>, hosts: Vec<Arc<Host>>) -> Result<Self> {
        if let Some(host) = hosts.iter().find(|h| !Arc::ptr_eq(h.pod(), &pod)) {
            return Err(Error::HostOfAnotherPod { host: host.id() });
        }
        Ok(Self { pod, hosts })
    }

    /// Joins `count` new hosts to `pod` (the first free ids), each with `options`.
    pub fn join(pod: Arc<Pod>, count: usize, options: &HostOptions) -> Result<Self> {
        let hosts = (0..count)
            .map(|_| Host::join(&pod, Join::AnyFree, options.clone()).map(Arc::new))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(Self::new(pod, hosts))
    }

    /// The pod.
    pub fn pod(&self) -> &Arc<Pod> {
        &self.pod
    }

    /// The hosts, in handle order.
    pub fn hosts(&self) -> &[Arc<Host>] {
        &self.hosts
    }

    /// The core's event counts summed over the hosts.
    pub fn events(&self) -> EventCounts {
        self.hosts
            .iter()
            .fold(EventCounts::default(), |sum, host| sum + host.events())
    }
}

impl Scheme for Megalon {
    type Handle = MegalonHandle;

    fn name(&self) -> &'static str {
        "megalon"
    }

    fn limits(&self) -> Limits {
        let config = self.pod.config();
        Limits {
            max_key_bytes: config.max_key_bytes as usize,
            object_bytes: config.slot_size_bytes as usize,
        }
    }

    fn hosts(&self) -> usize {
        self.hosts.len()
    }

    fn handle(&self, host: usize) -> Result<MegalonHandle> {
        let host = self.hosts.get(host).ok_or(Error::UnknownHost {
            host,
            hosts: self.hosts.len(),
        })?;
        Ok(MegalonHandle { host: host.clone() })
    }

    fn report(&self) -> Report {
        let e = self.events();
        let (mut appended, mut batches, mut replayed) = (0, 0, 0);
        for host in &self.hosts {
            let stats = host.inspect().stats();
            appended += stats.entries_appended;
            batches += stats.batches_appended;
            replayed += stats.entries_replayed;
        }
        let (records_in_use, records) = self
            .hosts
            .first()
            .map_or((0, 0), |host| host.inspect().records_in_use());
        let width = self.hosts.first().and_then(|host| host.record_width().ok());
        let usage = self.pod.scr_usage();
        Report {
            scheme: "megalon",
            counters: vec![
                ("reads", e.reads),
                ("writes", e.writes),
                ("creates", e.creates),
                ("deletes", e.deletes),
                ("read retries", e.read_retries()),
                ("waits for a writer", e.waits_for_writer),
                ("lines invalidated", e.lines_invalidated),
                ("lines written back", e.lines_written_back),
                ("SCR atomics", e.scr_atomics),
                ("record allocs", e.record_allocs),
                ("record allocs lost", e.record_allocs_lost),
                ("record deallocs", e.record_deallocs),
                ("churn", e.churn),
                ("counter wraps", e.wraps),
                ("moves to a host", e.moves_to_host),
                ("moves lost", e.moves_lost),
                ("move-backs", e.move_backs),
                ("local reads", e.local_reads),
                ("local writes", e.local_writes),
                ("copies made", e.copies_made),
                ("copy reads", e.copy_reads),
                ("copies invalidated", e.copies_invalidated),
                ("rpcs sent", e.rpcs_sent),
                ("rpcs served", e.rpcs_served),
                ("log entries appended", appended),
                ("log batches appended", batches),
                ("log entries replayed", replayed),
            ],
            gauges: vec![
                ("records in use", records_in_use),
                ("records in the pod", records),
                ("record bits", width.map_or(0, |w| u64::from(w.bits))),
                (
                    "record width switches",
                    width.map_or(0, |w| u64::from(w.epoch)),
                ),
            ],
            scr: vec![
                ("log cursors", usage.log_cursors_bytes),
                ("host table", usage.host_table_bytes),
                ("rpc rings", usage.rpc_bytes),
                ("application", usage.application_bytes),
                ("coherence records", usage.records_bytes),
                ("reclaimer", usage.reclaimer_bytes),
                ("unused", usage.unused_bytes),
            ],
        }
    }
}

/// A thread's handle on one megalon host.
pub struct MegalonHandle {
    host: Arc<Host>,
}

impl MegalonHandle {
    /// The host.
    pub fn host(&self) -> &Arc<Host> {
        &self.host
    }
}

impl SchemeHandle for MegalonHandle {
    fn create(&mut self, key: &[u8], object: &[u8]) -> Result<()> {
        Ok(self.host.create(key, object)?)
    }

    fn write(&mut self, key: &[u8], object: &[u8]) -> Result<()> {
        self.host.write(key, object)?;
        Ok(())
    }

    fn read(&mut self, key: &[u8], buf: &mut [u8], extent: Extent<'_>) -> Result<usize> {
        // `extent` may see bytes of a write in progress; clamped, they only decide how
        // much more to copy, and the read throws a copy that overlapped a write away.
        let (total, _) = self.host.read_prefix(key, buf, extent)?;
        Ok(total)
    }

    fn read_many(
        &mut self,
        reads: &mut [(&[u8], &mut [u8])],
        extent: Extent<'_>,
    ) -> Vec<Result<usize>> {
        self.host
            .read_many_prefix(reads, extent)
            .into_iter()
            .map(|answer| Ok(answer.map(|(total, _)| total)?))
            .collect()
    }

    fn delete(&mut self, key: &[u8]) -> Result<()> {
        Ok(self.host.delete(key)?)
    }

    fn update(&mut self, key: &[u8], change: &mut dyn FnMut(&mut [u8])) -> Result<()> {
        // The core's update runs `change` between write_start and write_end (or under the
        // object's local lock in this host's DRAM): nobody else writes it in between.
        self.host.update(key, |object| change(object))?;
        Ok(())
    }
}
