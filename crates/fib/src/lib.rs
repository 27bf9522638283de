//! Longest-prefix match (placeholder: being written).
