//! Snapshot tests of whole screens drawn into a TestBackend.
