//! (screen tests: written below)
