//! Properties of every layout: regions in bounds and disjoint, offsets aligned, SCR usage
//! reported exactly, the header round-trips and rejects any corrupted byte.

use std::path::Path;

use megalon_core::{
    inspect::PodHeader,
    limits::{
        HEADER_BYTES, HEADER_REGION_BYTES, LINE_BYTES, MAX_HOSTS_LIMIT, PAGE_BYTES,
        RECORD_WIDTHS_BITS,
    },
    Backing, Coherence, Error, Layout, Pod, PodConfig, Region,
};
use proptest::prelude::*;

/// Configurations whose every parameter is valid alone; together they may not fit.
fn any_config() -> impl Strategy<Value = PodConfig> {
    (
        // SCR pages, up to 1 MiB; often few, so that some SCRs are too small.
        prop_oneof![1..=4u64, 1..=256u64],
        // LNR pages, up to 16 MiB; often few, so that some LNRs are too small.
        prop_oneof![1..=16u64, 1..=4096u64],
        1..=256u64,  // slot lines: up to 16 KiB
        1..=1024u32, // max key bytes
        2..=4096u64, // log entries
        0..RECORD_WIDTHS_BITS.len(),
        1..=MAX_HOSTS_LIMIT,
        // Application lines in SCR and LNR: mostly none.
        prop_oneof![3 => Just(0u64), 1 => 1..=64u64],
        prop_oneof![3 => Just(0u64), 1 => 1..=256u64],
        prop_oneof![Just(Coherence::Split), Just(Coherence::AllLog)],
    )
        .prop_map(
            |(
                scr_pages,
                lnr_pages,
                slot_lines,
                key_bytes,
                log_entries,
                width,
                hosts,
                app_scr_lines,
                app_lnr_lines,
                coherence,
            )| {
                PodConfig::new()
                    .scr_bytes(scr_pages * PAGE_BYTES)
                    .lnr_bytes(lnr_pages * PAGE_BYTES)
                    .slot_size_bytes(slot_lines * LINE_BYTES)
                    .max_key_bytes(key_bytes)
                    .log_capacity_entries(log_entries)
                    .record_width_bits(RECORD_WIDTHS_BITS[width])
                    .max_hosts(hosts)
                    .app_scr_bytes(app_scr_lines * LINE_BYTES)
                    .app_lnr_bytes(app_lnr_lines * LINE_BYTES)
                    .coherence(coherence)
            },
        )
}

/// Layouts of configurations that fit.
fn any_layout() -> impl Strategy<Value = Layout> {
    any_config().prop_filter_map("layout does not fit", |config| Layout::new(&config).ok())
}

/// `[start, end)` of a named piece of the pod.
#[derive(Clone, Copy, Debug)]
struct Span {
    name: &'static str,
    start: u64,
    end: u64,
}

fn span(name: &'static str, start: u64, bytes: u64) -> Span {
    Span {
        name,
        start,
        end: start + bytes,
    }
}

fn contains(outer: Span, inner: Span) -> bool {
    outer.start <= inner.start && inner.end <= outer.end
}

fn region(layout: &Layout, name: &str) -> Span {
    let (name, offset, bytes) = layout
        .regions()
        .into_iter()
        .find(|(n, _, _)| *n == name)
        .unwrap_or_else(|| panic!("no region {name}"));
    span(name, offset, bytes)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn regions_are_disjoint_in_bounds_and_in_address_order(layout in any_layout()) {
        let config = &layout.config;
        let regions: Vec<Span> = layout
            .regions()
            .into_iter()
            .map(|(name, offset, bytes)| span(name, offset, bytes))
            .collect();
        let pod = span("pod", 0, layout.total_bytes);
        prop_assert_eq!(layout.total_bytes, HEADER_REGION_BYTES + config.scr_bytes + config.lnr_bytes);
        for region in &regions {
            prop_assert!(region.end > region.start, "{} is empty: {:?}", region.name, region);
            prop_assert!(contains(pod, *region), "{:?} outside the pod of {}", region, layout.total_bytes);
        }
        for pair in regions.windows(2) {
            prop_assert!(pair[0].end <= pair[1].start, "{:?} overlaps {:?}", pair[0], pair[1]);
        }
        // Each region lies in the part of the pod it belongs to.
        let scr = span("SCR", layout.scr_offset, config.scr_bytes);
        let lnr = span("LNR", layout.lnr_offset, config.lnr_bytes);
        prop_assert_eq!(scr.end, lnr.start);
        prop_assert_eq!(lnr.end, layout.total_bytes);
        for name in ["log cursors", "host table", "records", "reclaimer"] {
            prop_assert!(contains(scr, region(&layout, name)), "{} outside SCR", name);
        }
        for name in ["log entries", "slots"] {
            prop_assert!(contains(lnr, region(&layout, name)), "{} outside LNR", name);
        }
        // The application's regions, when configured, are whole and in their part.
        let app = |name: &str| layout.regions().into_iter().find(|(n, _, _)| *n == name);
        match app("app SCR") {
            Some((_, offset, bytes)) => {
                prop_assert_eq!((offset, bytes), (layout.app_scr_offset, config.app_scr_bytes));
                prop_assert!(contains(scr, span("app SCR", offset, bytes)));
            }
            None => prop_assert_eq!(config.app_scr_bytes, 0),
        }
        match app("app LNR") {
            Some((_, offset, bytes)) => {
                prop_assert_eq!((offset, bytes), (layout.app_lnr_offset, config.app_lnr_bytes));
                prop_assert!(contains(lnr, span("app LNR", offset, bytes)));
            }
            None => prop_assert_eq!(config.app_lnr_bytes, 0),
        }
        prop_assert!(region(&layout, "header").end <= scr.start);
    }

    #[test]
    fn every_offset_function_stays_in_its_region_and_is_aligned(layout in any_layout()) {
        let config = &layout.config;
        let hosts = config.max_hosts;
        let cursors = region(&layout, "log cursors");
        let host_table = region(&layout, "host table");
        let records = region(&layout, "records");
        let log = region(&layout, "log entries");
        let slots = region(&layout, "slots");

        // (the region it must lie in, the piece, the alignment it needs)
        let mut pieces = vec![
            (cursors, span("tail", layout.tail_offset(), 8), LINE_BYTES),
            (cursors, span("head", layout.head_offset(), 8), LINE_BYTES),
            (cursors, span("ctail", layout.ctail_offset(), 8), LINE_BYTES),
        ];
        for host in [0, hosts / 2, hosts - 1] {
            pieces.push((cursors, span("ltail", layout.ltail_offset(host), LINE_BYTES), LINE_BYTES));
            pieces.push((host_table, span("host entry", layout.host_entry_offset(host), LINE_BYTES), LINE_BYTES));
        }
        for record in [0, layout.record_count / 2, layout.record_count - 1] {
            pieces.push((records, span("record", layout.record_offset(record), layout.record_bytes), layout.record_bytes));
        }
        for entry in [0, config.log_capacity_entries / 2, config.log_capacity_entries - 1] {
            pieces.push((log, span("log entry", layout.log_entry_offset(entry), layout.log_entry_bytes), LINE_BYTES));
        }
        for slot in [0, layout.slot_count / 2, layout.slot_count - 1] {
            pieces.push((slots, span("slot", layout.slot_offset(slot), config.slot_size_bytes), LINE_BYTES));
        }
        for (outer, piece, alignment) in pieces {
            prop_assert!(contains(outer, piece), "{} outside {}: {:?}, {:?}", piece.name, outer.name, piece, outer);
            prop_assert_eq!(piece.start % alignment, 0, "{:?} not aligned to {}", piece, alignment);
        }

        // The last of each kind ends where its region does: nothing is lost at the end.
        prop_assert_eq!(layout.record_offset(layout.record_count - 1) + layout.record_bytes, records.end);
        prop_assert_eq!(layout.host_entry_offset(hosts - 1) + LINE_BYTES, host_table.end);
        prop_assert_eq!(layout.ltail_offset(hosts - 1) + LINE_BYTES, cursors.end);
        prop_assert_eq!(
            layout.log_entry_offset(config.log_capacity_entries - 1) + layout.log_entry_bytes,
            log.end
        );
        prop_assert_eq!(layout.slot_offset(layout.slot_count - 1) + config.slot_size_bytes, slots.end);

        // Every cursor on a line of its own.
        let mut cursor_lines: Vec<u64> = [layout.tail_offset(), layout.head_offset(), layout.ctail_offset()]
            .into_iter()
            .chain((0..hosts).map(|host| layout.ltail_offset(host)))
            .map(|offset| offset / LINE_BYTES)
            .collect();
        cursor_lines.sort_unstable();
        cursor_lines.dedup();
        prop_assert_eq!(cursor_lines.len() as u64, 3 + u64::from(hosts));

        // Regions start on a line; SCR and LNR on a page.
        for (name, offset, _) in layout.regions() {
            prop_assert_eq!(offset % LINE_BYTES, 0, "{} at {:#x}", name, offset);
        }
        prop_assert_eq!(layout.scr_offset % PAGE_BYTES, 0);
        prop_assert_eq!(layout.lnr_offset % PAGE_BYTES, 0);
        prop_assert_eq!(layout.cursors_offset, layout.scr_offset);
        prop_assert_eq!(layout.log_offset, layout.lnr_offset);
        prop_assert_eq!(layout.record_bytes, u64::from(config.record_width_bits).div_ceil(8));
        prop_assert_eq!(layout.log_entry_bytes, config.log_entry_bytes());
    }

    #[test]
    fn scr_usage_adds_up_and_records_take_all_that_fits(layout in any_layout()) {
        let config = &layout.config;
        let usage = layout.scr_usage();
        prop_assert_eq!(usage.total_bytes(), config.scr_bytes);
        prop_assert_eq!(usage.log_cursors_bytes, region(&layout, "log cursors").end - region(&layout, "log cursors").start);
        prop_assert_eq!(usage.host_table_bytes, u64::from(config.max_hosts) * LINE_BYTES);
        prop_assert_eq!(usage.application_bytes, config.app_scr_bytes);
        prop_assert_eq!(usage.records_bytes, layout.record_count * u64::from(config.record_width_bits) / 8);
        prop_assert!(usage.records_bytes >= LINE_BYTES, "less than a line of records");
        // Too little is left for one more record (so less than a line).
        prop_assert!(
            usage.unused_bytes < layout.record_bytes,
            "{} bytes unused, records are {} bytes", usage.unused_bytes, layout.record_bytes
        );
        // The slots likewise take all of LNR that the log leaves, but for less than a slot.
        let lnr_end = layout.lnr_offset + config.lnr_bytes;
        let slots = region(&layout, "slots");
        prop_assert!(lnr_end - slots.end < config.slot_size_bytes);
    }

    #[test]
    fn every_config_lays_out_or_says_which_region_is_too_small(config in any_config()) {
        match Layout::new(&config) {
            // `Auto` crash safety is laid out as an in-process pod's.
            Ok(layout) => prop_assert_eq!(&layout.config, &config.resolved_for(&Backing::heap())),
            Err(Error::LayoutDoesNotFit { region, needed_bytes, available_bytes }) => {
                prop_assert!(needed_bytes > available_bytes);
                let (available, with_size): (u64, fn(PodConfig, u64) -> PodConfig) = match region {
                    Region::Scr => (config.scr_bytes, PodConfig::scr_bytes),
                    Region::Lnr => (config.lnr_bytes, PodConfig::lnr_bytes),
                    Region::Device => return Err(TestCaseError::fail("small sizes overflowed")),
                };
                prop_assert_eq!(available_bytes, available);
                // `needed_bytes` is the least that fits: the region fits in the whole
                // pages that hold it, and not in a page less.
                let least = needed_bytes.next_multiple_of(PAGE_BYTES);
                let fits_in = |bytes| match Layout::new(&with_size(config.clone(), bytes)) {
                    Err(Error::LayoutDoesNotFit { region: r, .. }) => r != region,
                    _ => true,
                };
                prop_assert!(fits_in(least), "{} does not fit in {} bytes", region, least);
                prop_assert!(!fits_in(least - PAGE_BYTES), "{} fits in {} bytes", region, least - PAGE_BYTES);
            }
            Err(other) => return Err(TestCaseError::fail(format!("{other:?}"))),
        }
    }

    #[test]
    fn header_round_trips(layout in any_layout()) {
        let header = PodHeader::new(&layout);
        let (decoded, decoded_layout) =
            PodHeader::decode(&header.encode(), Path::new("round-trip")).unwrap();
        prop_assert_eq!(decoded, header);
        prop_assert_eq!(decoded.config(), layout.config.clone());
        prop_assert_eq!(decoded_layout, layout);
    }

    #[test]
    fn a_corrupted_header_byte_is_always_rejected(
        layout in any_layout(),
        at in 0..HEADER_BYTES,
        flip in 1..=255u8,
    ) {
        let mut bytes = PodHeader::new(&layout).encode();
        bytes[at] ^= flip;
        match PodHeader::decode(&bytes, Path::new("corrupted")) {
            Err(Error::BadMagic { .. } | Error::UnknownVersion { .. } | Error::ChecksumMismatch { .. }) => {}
            other => {
                return Err(TestCaseError::fail(format!(
                    "byte {at} ^ {flip:#04x}: {:?}",
                    other.map(|(header, _)| header)
                )))
            }
        }
    }
}

#[test]
fn a_file_pod_opens_with_the_layout_it_was_created_with() {
    let dir = tempfile::tempdir().unwrap();
    let configs = [
        PodConfig::new()
            .scr_bytes(PAGE_BYTES)
            .lnr_bytes(4 * PAGE_BYTES)
            .log_capacity_entries(2)
            .max_hosts(1)
            .max_key_bytes(1)
            .slot_size_bytes(64)
            .record_width_bits(8)
            .join_area_bytes(0),
        // 64 hosts, each with a line of table, two of lock announces and 16 undo images.
        PodConfig::new()
            .scr_bytes(5 * PAGE_BYTES)
            .lnr_bytes(2048 * PAGE_BYTES)
            .slot_size_bytes(4096)
            .max_key_bytes(1024)
            .log_capacity_entries(100)
            .record_width_bits(16)
            .max_hosts(MAX_HOSTS_LIMIT),
        PodConfig::new()
            .scr_bytes(16 * PAGE_BYTES)
            .lnr_bytes(512 * PAGE_BYTES)
            .slot_size_bytes(192)
            .max_key_bytes(33)
            .log_capacity_entries(1000)
            .record_width_bits(32)
            .max_hosts(7),
        PodConfig::new()
            .scr_bytes(2 * PAGE_BYTES)
            .lnr_bytes(64 * PAGE_BYTES)
            .slot_size_bytes(256)
            .max_key_bytes(40)
            .log_capacity_entries(128)
            .max_hosts(3)
            .coherence(Coherence::AllLog),
    ];
    for (i, config) in configs.iter().enumerate() {
        let path = dir.path().join(format!("pod{i}"));
        let created = Pod::create(config, Backing::file(&path)).unwrap();
        let created_layout = created.layout().clone();
        let resolved = config.resolved_for(&Backing::file(&path));
        assert_eq!(created_layout, Layout::new(&resolved).unwrap());
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            created_layout.total_bytes
        );
        // Opened while the creator still maps it, and after it is gone.
        assert_eq!(
            Pod::open(Backing::file(&path)).unwrap().layout(),
            &created_layout
        );
        drop(created);
        assert_eq!(
            Pod::open(Backing::file(&path)).unwrap().layout(),
            &created_layout
        );
        assert_eq!(
            Pod::open_expecting(Backing::file(&path), config)
                .unwrap()
                .layout(),
            &created_layout
        );
        assert_eq!(
            Pod::open(Backing::file(&path)).unwrap().config().coherence,
            config.coherence,
            "the coherence mode is in the header"
        );
    }
}

#[test]
fn the_coherence_mode_round_trips_through_config_and_header() {
    for coherence in [Coherence::Split, Coherence::AllLog] {
        let config = PodConfig::new().coherence(coherence);
        let layout = Layout::new(&config).unwrap();
        let header = PodHeader::new(&layout);
        assert_eq!(header.coherence, coherence.to_u32());
        let (decoded, decoded_layout) =
            PodHeader::decode(&header.encode(), Path::new("round-trip")).unwrap();
        assert_eq!(decoded.config().coherence, coherence);
        assert_eq!(decoded_layout, layout);
        assert_eq!(Coherence::from_u32(coherence.to_u32()), Some(coherence));
    }
    assert_eq!(
        PodConfig::new().coherence,
        Coherence::Split,
        "split by default"
    );
    assert_eq!(Coherence::from_u32(2), None);
}
