//! Fuzz target `stack_rx`: arbitrary input read as a sequence of frames, time advances,
//! receives and sends, fed to one `Interface` over a `HeapPool`; see
//! `shmnet_stack::fuzzing::stack_rx` for the input format. It asserts buffer conservation.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    shmnet_stack::fuzzing::stack_rx(data);
});
