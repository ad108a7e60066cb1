use std::time::{Duration, Instant};

use super::state::*;
use crate::model::Model;
use fuser::Errno;

fn state(month_seconds: Option<f64>) -> DiskState {
    let model = Model::preset("none").unwrap();
    DiskState::in_memory(1 << 20, model, 4, month_seconds).unwrap()
}

#[test]
fn writes_stamp_blocks_and_age_moves_the_clock() {
    let s = state(None);
    assert_eq!(s.block_age(0), None, "never written");
    s.write(0, &[7u8; 6000]).unwrap();
    assert_eq!(s.block_age(0), Some(0.0));
    assert_eq!(
        s.block_age(1),
        Some(0.0),
        "a partly written block is written"
    );
    assert_eq!(s.block_age(2), None);
    s.age(3.0);
    assert_eq!(s.block_age(1), Some(3.0));
    s.write(4096, &[8u8; 4096]).unwrap();
    assert_eq!(
        (s.block_age(0), s.block_age(1)),
        (Some(3.0), Some(0.0)),
        "a rewrite is fresh"
    );
    assert_eq!(s.read(0, 4).unwrap(), vec![7u8; 4]);
    s.discard(0, 8192).unwrap();
    assert_eq!(s.block_age(0), None, "discarded blocks are fresh");
    assert_eq!(s.read(0, 4).unwrap(), vec![0u8; 4]);
    let st = s.stats();
    assert_eq!((st.writes, st.write_bytes, st.discards), (2, 10_096, 1));
}

#[test]
fn faults_fail_reads_and_log_writes() {
    let s = state(None);
    s.add_fault(8192, 100);
    assert_eq!(s.read(8000, 200).unwrap_err(), Errno::EIO);
    assert!(s.read(0, 8192).is_ok());
    s.write(0, &[1u8; 4096]).unwrap();
    assert!(s.stats().faulty_writes.is_empty());
    s.write(8200, &[1u8; 10]).unwrap();
    assert_eq!(s.stats().faulty_writes, vec![(8200, 10)]);
    assert_eq!(s.stats().read_errors, 1);
}

#[test]
fn a_capped_link_caps_reads_and_writes() {
    let s = state(None);
    s.write(0, &[1u8; 1 << 20]).unwrap();
    s.set_link_cap(10 << 20); // 10 MiB/s: 1 MiB takes 100 ms
    let t = Instant::now();
    s.read(0, 1 << 20).unwrap();
    s.write(0, &[2u8; 1 << 20]).unwrap();
    assert!(
        t.elapsed() >= Duration::from_millis(190),
        "{:?}",
        t.elapsed()
    );
    s.set_link_cap(0);
    let t = Instant::now();
    s.read(0, 1 << 20).unwrap();
    assert!(t.elapsed() < Duration::from_millis(90), "uncapped again");
}

#[test]
fn heavy_writes_fade_every_request_until_a_discard() {
    let s = state(None);
    s.set_fade(256 << 10, 20);
    let fresh = {
        let t = Instant::now();
        s.read(0, 256 << 10).unwrap();
        t.elapsed()
    };
    s.write(0, &[3u8; 512 << 10]).unwrap();
    let t = Instant::now();
    s.read(0, 256 << 10).unwrap();
    let faded = t.elapsed();
    assert!(faded > fresh * 5, "faded {faded:?} vs {fresh:?}");
    s.discard(768 << 10, 64 << 10).unwrap();
    let t = Instant::now();
    s.read(0, 256 << 10).unwrap();
    assert!(t.elapsed() < faded / 3, "TRIM cured it");
}

#[test]
fn write_faults_fail_writes_and_change_nothing() {
    let s = state(None);
    s.write(0, &[7u8; 16384]).unwrap();
    s.add_write_fault(4096, 4096);
    assert_eq!(s.write(0, &[9u8; 8192]).unwrap_err(), Errno::EIO);
    assert_eq!(
        s.read(0, 16384).unwrap(),
        vec![7u8; 16384],
        "nothing written"
    );
    s.write(8192, &[9u8; 4096]).unwrap();
    assert_eq!(s.read(8192, 4096).unwrap(), vec![9u8; 4096]);
    let st = s.stats();
    assert_eq!(st.write_errors, 1);
    assert_eq!(st.write_faults, vec![(4096, 4096)]);
    assert_eq!(st.read_errors, 0, "reads of the range still work");
}

#[test]
fn the_clock_runs_by_itself_with_month_seconds() {
    let s = state(Some(0.01));
    s.write(0, &[1u8; 4096]).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert!(s.block_age(0).unwrap() >= 4.0, "{:?}", s.block_age(0));
}

#[test]
fn writes_past_the_end_are_refused() {
    let s = state(None);
    assert_eq!(
        s.write((1 << 20) - 10, &[0u8; 20]).unwrap_err(),
        Errno::ENOSPC
    );
    assert!(s.read(1 << 20, 10).unwrap().is_empty());
}

#[test]
fn the_flash_is_sparse_memory_that_discards_give_back() {
    let s = state(None);
    assert_eq!(s.flash_bytes(), 0, "nothing written, nothing held");
    s.write(8192, &[5u8; 8192]).unwrap();
    assert_eq!(s.flash_bytes(), 8192);
    assert_eq!(
        s.read(0, 16384).unwrap()[..8192],
        [0u8; 8192],
        "a hole reads zeros"
    );
    assert_eq!(s.read(8192, 8192).unwrap(), vec![5u8; 8192]);
    s.discard(8192, 4096).unwrap();
    assert_eq!(s.read(8192, 8192).unwrap()[..4096], [0u8; 4096]);
    assert_eq!(s.read(12288, 4096).unwrap(), vec![5u8; 4096]);
    assert_eq!(
        s.flash_bytes(),
        4096,
        "the discarded block's memory is back"
    );
}

#[test]
fn real_io_slower_than_the_model_is_counted_as_an_overrun() {
    let s = state(None);
    let us = Duration::from_micros;
    s.counters.io_took(us(300), us(500));
    let st = s.stats();
    assert_eq!((st.overruns, st.overrun_us, st.slowest_io_us), (0, 0, 300));
    s.counters.io_took(us(1400), us(500));
    assert_eq!(
        s.stats().overruns,
        0,
        "within the slack: a preempted thread"
    );
    s.counters.io_took(us(2500), us(500));
    let st = s.stats();
    assert_eq!(
        (st.overruns, st.overrun_us, st.slowest_io_us),
        (1, 2000, 2500)
    );
    assert!(st.render().contains("SLOWER THAN THE MODEL: 1 requests"));
}
