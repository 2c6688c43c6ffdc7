//! The trace formats: golden inputs, golden bytes, and bad input giving errors (never
//! panics), with offsets.

use proptest::prelude::*;
use shmnet_sim::trace::{
    self, BinaryReader, DinReader, Format, LackeyReader, TraceWriter, binary, guess_format,
};
use shmnet_sim::{Op, Party, Ref, TraceError, TraceSource};

fn all(src: &mut dyn TraceSource) -> Result<Vec<Ref>, TraceError> {
    let mut out = Vec::new();
    let mut batch = Vec::new();
    loop {
        src.next_batch(&mut batch, 3)?;
        if batch.is_empty() {
            return Ok(out);
        }
        out.extend_from_slice(&batch);
    }
}

fn r(op: Op, addr: u64, size: u32) -> Ref {
    Ref {
        party: Party::Other,
        op,
        size,
        addr,
    }
}

#[test]
fn din_golden() {
    let text = "0 1000 4\n1 0x7fffffffffff0008 8\r\n\n2\t400000\n0 ffffffffffffffff 1";
    let refs = all(&mut DinReader::new(text.as_bytes())).unwrap();
    assert_eq!(
        refs,
        [
            r(Op::Read, 0x1000, 4),
            r(Op::Write, 0x7fff_ffff_ffff_0008, 8),
            r(Op::Ifetch, 0x40_0000, 1),
            r(Op::Read, u64::MAX, 1),
        ]
    );
}

#[test]
fn din_errors_name_the_line() {
    for (text, line, offset, what) in [
        ("0 10 4\n3 1000\n", 2, 7, "label"),
        ("0 10 4\n0 zz\n", 2, 7, "hex address"),
        ("0\n", 1, 0, "no address"),
        ("0 10 0\n", 1, 0, "size"),
        ("0 10 4 5\n", 1, 0, "three fields"),
        ("0 1ffffffffffffffff\n", 1, 0, "64 bits"),
    ] {
        match all(&mut DinReader::new(text.as_bytes())) {
            Err(TraceError::Bad {
                line: Some(l),
                offset: o,
                detail,
                ..
            }) => {
                assert_eq!((l, o), (line, offset), "{text:?}");
                assert!(detail.contains(what), "{text:?}: {detail}");
            }
            other => panic!("{text:?}: {other:?}"),
        }
    }
}

const LACKEY: &str = "==1234== Lackey, an example Valgrind tool
==1234== Copyright (C) 2002-2017, and GNU GPL'd, by Nicholas Nethercote.
I  04016cc,3
 L 1ffefffd78,8
 S 04222cac,8
 M 0421d3c0,4
I  04016cf,2
==1234== 
";

#[test]
fn lackey_golden() {
    let refs = all(&mut LackeyReader::new(LACKEY.as_bytes())).unwrap();
    assert_eq!(
        refs,
        [
            r(Op::Ifetch, 0x4016cc, 3),
            r(Op::Read, 0x1f_feff_fd78, 8),
            r(Op::Write, 0x422_2cac, 8),
            r(Op::Read, 0x421_d3c0, 4),
            r(Op::Write, 0x421_d3c0, 4),
            r(Op::Ifetch, 0x4016cf, 2),
        ]
    );
}

#[test]
fn lackey_errors() {
    for text in [
        "hello world\n",
        " L 1000\n",
        " L zz,4\n",
        " S 1000,x\n",
        " M 10,0\n",
    ] {
        let e = all(&mut LackeyReader::new(text.as_bytes())).unwrap_err();
        assert!(
            matches!(e, TraceError::Bad { line: Some(1), .. }),
            "{text:?}: {e}"
        );
    }
}

#[test]
fn binary_golden_bytes_and_round_trip() {
    let mut w = TraceWriter::new(Vec::new()).unwrap();
    w.write(Party::Application, Op::Write, 0x1122_3344_5566_7788, 1460)
        .unwrap();
    w.write(Party::Load, Op::Read, 0x10, 70_000).unwrap(); // split: 65,535 + 4,465
    assert_eq!(w.records(), 3);
    let bytes = w.finish().unwrap();
    assert_eq!(
        &bytes[..28],
        &[
            b'S', b'H', b'M', b'T', b'R', b'C', b'0', b'1', 1, 0, 12, 0, 0, 0, 0, 0, // header
            2, 1, 0xb4, 0x05, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, // record
        ]
    );
    assert_eq!(bytes.len(), 16 + 3 * 12);
    let refs = all(&mut BinaryReader::new(&bytes[..]).unwrap()).unwrap();
    assert_eq!(
        refs,
        [
            Ref {
                party: Party::Application,
                op: Op::Write,
                size: 1460,
                addr: 0x1122_3344_5566_7788
            },
            Ref {
                party: Party::Load,
                op: Op::Read,
                size: 65535,
                addr: 0x10
            },
            Ref {
                party: Party::Load,
                op: Op::Read,
                size: 4465,
                addr: 0x10 + 65535
            },
        ]
    );
}

fn bin_err(bytes: &[u8]) -> (u64, String) {
    let e = match BinaryReader::new(bytes) {
        Err(e) => e,
        Ok(mut rd) => all(&mut rd).unwrap_err(),
    };
    match e {
        TraceError::Bad { offset, detail, .. } => (offset, detail),
        other => panic!("{other:?}"),
    }
}

#[test]
fn binary_bad_input_is_an_error_with_its_offset() {
    let mut w = TraceWriter::new(Vec::new()).unwrap();
    for i in 0..3 {
        w.write(Party::Driver, Op::Read, i * 64, 8).unwrap();
    }
    let good = w.finish().unwrap();
    // Truncated in the third record.
    let (off, d) = bin_err(&good[..good.len() - 5]);
    assert_eq!(off, 16 + 24);
    assert!(d.contains("truncated"), "{d}");
    // A bad party in the second record, a bad op in the third, a zero size.
    let mut b = good.clone();
    b[16 + 12] = 9;
    assert_eq!(bin_err(&b), (28, "party 9 is not 0..=4".into()));
    let mut b = good.clone();
    b[16 + 24 + 1] = 7;
    assert_eq!(bin_err(&b).0, 40);
    let mut b = good.clone();
    b[16 + 2] = 0;
    assert_eq!(bin_err(&b), (16, "size 0".into()));
    // Header problems.
    assert!(bin_err(&good[..10]).1.contains("header"));
    assert!(
        bin_err(b"SHMTRC02\x01\x00\x0c\x00\0\0\0\0")
            .1
            .contains("magic")
    );
    assert!(
        bin_err(b"SHMTRC01\x02\x00\x0c\x00\0\0\0\0")
            .1
            .contains("version 2")
    );
}

#[test]
fn formats_are_guessed() {
    let mut w = TraceWriter::new(Vec::new()).unwrap();
    w.write(Party::Driver, Op::Read, 0, 8).unwrap();
    let bin = w.finish().unwrap();
    assert_eq!(guess_format(&bin), Some(Format::Shmnet));
    assert_eq!(guess_format(LACKEY.as_bytes()), Some(Format::Lackey));
    assert_eq!(guess_format(b"\n0 1000 4\n"), Some(Format::Din));
    assert_eq!(guess_format(b"hello\n"), None);
    // Through `open`, which gives the sniffed bytes back.
    let (f, mut src) = trace::open(
        Box::new(std::io::Cursor::new(LACKEY.as_bytes().to_vec())),
        None,
    )
    .unwrap();
    assert_eq!(f, Format::Lackey);
    assert_eq!(all(src.as_mut()).unwrap().len(), 6);
}

#[test]
fn progress_reports_bytes() {
    let text = "0 10 4\n".repeat(100_000);
    let m = shmnet_sim::Machine::preset("sgi-r4400-1994").unwrap();
    let mut sim = shmnet_sim::Simulator::new(&m).unwrap();
    let mut seen = Vec::new();
    sim.run(&mut DinReader::new(text.as_bytes()), |b| seen.push(b))
        .unwrap();
    assert_eq!(sim.refs(), 100_000);
    assert_eq!(*seen.last().unwrap(), text.len() as u64);
    assert!(seen.windows(2).all(|w| w[0] <= w[1]));
    let _ = binary::HEADER_BYTES;
}

proptest! {
    #[test]
    fn no_reader_panics_on_garbage(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        let _ = all(&mut DinReader::new(&bytes[..]));
        let _ = all(&mut LackeyReader::new(&bytes[..]));
        let mut with_header = binary::header().to_vec();
        with_header.extend_from_slice(&bytes);
        if let Ok(mut rd) = BinaryReader::new(&with_header[..]) {
            let _ = all(&mut rd);
        }
        let _ = guess_format(&bytes);
    }
}
