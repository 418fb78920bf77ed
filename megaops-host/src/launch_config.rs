//! The constants of a tile config as typed data: what `#[megaops::kernel]` records in
//! [`ConfigInfo::consts`] for each `#[config(...)]`, so that planners, the engine and a
//! tuner pick configs by their properties (`c.u32("BN") == Some(128)`) instead of by
//! index or by parsing [`ConfigInfo::name`].

use crate::launch::ConfigInfo;
use std::fmt;

/// The value of one config constant, in the type the kernel gives it.
///
/// Constants of other types (a user's own type) are not recorded; the kernel's launcher
/// module has them in its typed `CONSTS` table.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ConfigValue {
    /// A `u8` constant.
    U8(u8),
    /// A `u16` constant.
    U16(u16),
    /// A `u32` constant (an unsuffixed integer literal's type).
    U32(u32),
    /// A `u64` constant.
    U64(u64),
    /// A `usize` constant.
    Usize(usize),
    /// An `i8` constant.
    I8(i8),
    /// An `i16` constant.
    I16(i16),
    /// An `i32` constant (a negated unsuffixed integer literal's type).
    I32(i32),
    /// An `i64` constant.
    I64(i64),
    /// An `isize` constant.
    Isize(isize),
    /// An `f32` constant.
    F32(f32),
    /// An `f64` constant.
    F64(f64),
    /// A `bool` constant.
    Bool(bool),
}

impl ConfigValue {
    /// The value as an `i128` if it is an integer of any width (`None` for floats and
    /// `bool`): for comparisons across constants of different integer types.
    pub fn as_int(self) -> Option<i128> {
        Some(match self {
            ConfigValue::U8(v) => v.into(),
            ConfigValue::U16(v) => v.into(),
            ConfigValue::U32(v) => v.into(),
            ConfigValue::U64(v) => v.into(),
            ConfigValue::Usize(v) => v as i128,
            ConfigValue::I8(v) => v.into(),
            ConfigValue::I16(v) => v.into(),
            ConfigValue::I32(v) => v.into(),
            ConfigValue::I64(v) => v.into(),
            ConfigValue::Isize(v) => v as i128,
            ConfigValue::F32(_) | ConfigValue::F64(_) | ConfigValue::Bool(_) => return None,
        })
    }

    /// The Rust type of the value (`"u32"`, `"f32"`, ...), for messages.
    pub fn type_name(self) -> &'static str {
        match self {
            ConfigValue::U8(_) => "u8",
            ConfigValue::U16(_) => "u16",
            ConfigValue::U32(_) => "u32",
            ConfigValue::U64(_) => "u64",
            ConfigValue::Usize(_) => "usize",
            ConfigValue::I8(_) => "i8",
            ConfigValue::I16(_) => "i16",
            ConfigValue::I32(_) => "i32",
            ConfigValue::I64(_) => "i64",
            ConfigValue::Isize(_) => "isize",
            ConfigValue::F32(_) => "f32",
            ConfigValue::F64(_) => "f64",
            ConfigValue::Bool(_) => "bool",
        }
    }
}

impl fmt::Display for ConfigValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigValue::U8(v) => v.fmt(f),
            ConfigValue::U16(v) => v.fmt(f),
            ConfigValue::U32(v) => v.fmt(f),
            ConfigValue::U64(v) => v.fmt(f),
            ConfigValue::Usize(v) => v.fmt(f),
            ConfigValue::I8(v) => v.fmt(f),
            ConfigValue::I16(v) => v.fmt(f),
            ConfigValue::I32(v) => v.fmt(f),
            ConfigValue::I64(v) => v.fmt(f),
            ConfigValue::Isize(v) => v.fmt(f),
            ConfigValue::F32(v) => v.fmt(f),
            ConfigValue::F64(v) => v.fmt(f),
            ConfigValue::Bool(v) => v.fmt(f),
        }
    }
}

/// One accessor per value type: the constant `name` if the config has it with that type.
macro_rules! typed_getters {
    ($($(#[$doc:meta])* $f:ident -> $t:ty = $variant:ident;)*) => {$(
        $(#[$doc])*
        pub fn $f(&self, name: &str) -> Option<$t> {
            match self.get(name)? {
                ConfigValue::$variant(v) => Some(v),
                _ => None,
            }
        }
    )*};
}

impl ConfigInfo {
    /// The constant `name` of this config (`None` if the config has no such constant, or
    /// one of a type [`ConfigValue`] does not cover).
    pub fn get(&self, name: &str) -> Option<ConfigValue> {
        self.consts.iter().find(|(n, _)| *n == name).map(|&(_, v)| v)
    }

    /// The constant `name` as an integer of any width (see [`ConfigValue::as_int`]).
    pub fn int(&self, name: &str) -> Option<i128> {
        self.get(name)?.as_int()
    }

    typed_getters! {
        /// The `u32` constant `name` (`None` if absent or of another type).
        u32 -> u32 = U32;
        /// The `usize` constant `name` (`None` if absent or of another type).
        usize -> usize = Usize;
        /// The `u64` constant `name` (`None` if absent or of another type).
        u64 -> u64 = U64;
        /// The `i32` constant `name` (`None` if absent or of another type).
        i32 -> i32 = I32;
        /// The `bool` constant `name` (`None` if absent or of another type).
        bool -> bool = Bool;
        /// The `f32` constant `name` (`None` if absent or of another type).
        f32 -> f32 = F32;
        /// The `f64` constant `name` (`None` if absent or of another type).
        f64 -> f64 = F64;
    }

    /// Whether every `(name, value)` of `want` is a constant of this config with that
    /// value (compared as integers across widths, else exactly): `c.matches(&[("BN", 128),
    /// ("WK", 1)])`.
    pub fn matches(&self, want: &[(&str, i128)]) -> bool {
        want.iter().all(|&(n, v)| self.int(n) == Some(v))
    }
}

/// The index of the first config of `configs` whose integer constants have the values of
/// `want` (see [`ConfigInfo::matches`]): `config_where(gemv::CONFIGS, &[("BN", 128)])`.
pub fn config_where(configs: &[ConfigInfo], want: &[(&str, i128)]) -> Option<usize> {
    configs.iter().position(|c| c.matches(want))
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: ConfigInfo = ConfigInfo {
        name: "BN=128, U=4usize, ALPHA=(0.5f32), NC=true",
        entry: "k__BN128",
        traced_entry: None,
        consts: &[
            ("BN", ConfigValue::U32(128)),
            ("U", ConfigValue::Usize(4)),
            ("ALPHA", ConfigValue::F32(0.5)),
            ("NC", ConfigValue::Bool(true)),
        ],
    };

    #[test]
    fn typed_accessors_check_the_type() {
        assert_eq!(INFO.get("BN"), Some(ConfigValue::U32(128)));
        assert_eq!(INFO.u32("BN"), Some(128));
        assert_eq!(INFO.usize("BN"), None, "a u32 is not a usize");
        assert_eq!(INFO.usize("U"), Some(4));
        assert_eq!(INFO.f32("ALPHA"), Some(0.5));
        assert_eq!(INFO.bool("NC"), Some(true));
        assert_eq!(INFO.get("X"), None);
    }

    #[test]
    fn integers_compare_across_widths() {
        assert_eq!(INFO.int("U"), Some(4));
        assert_eq!(INFO.int("ALPHA"), None);
        assert!(INFO.matches(&[("BN", 128), ("U", 4)]));
        assert!(!INFO.matches(&[("BN", 128), ("U", 2)]));
        assert!(!INFO.matches(&[("X", 0)]));
        let other = ConfigInfo {
            consts: &[("BN", ConfigValue::U32(64))],
            ..INFO
        };
        assert_eq!(config_where(&[other, INFO], &[("BN", 128)]), Some(1));
        assert_eq!(config_where(&[other, INFO], &[("BN", 32)]), None);
        assert_eq!(ConfigValue::Usize(4).to_string(), "4");
        assert_eq!(ConfigValue::F32(0.5).type_name(), "f32");
    }
}
