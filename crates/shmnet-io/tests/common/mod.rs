//! Fixtures shared by integration tests.

#![allow(dead_code)]

pub mod netns;
pub mod stepped;
