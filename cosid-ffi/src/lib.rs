//! The C API of cosid (see include/cosid.h).
