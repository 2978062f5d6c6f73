//! The macro behind the contract's string enums: each variant is one fixed wire string,
//! with `as_str()` (usable in constants), `Display`, `FromStr` (an unknown string is an
//! error naming it) and `ALL` (so tests can walk every variant).

/// An unknown name given to a contract enum's `FromStr`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not a known {what}")]
pub struct UnknownName {
    /// What was parsed (e.g. "Pod condition reason").
    pub what: &'static str,
    /// The string that matched no variant.
    pub value: String,
}

/// Declares a contract enum; see the module docs.
macro_rules! string_enum {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident ($what:literal) {
            $( $(#[$vmeta:meta])* $variant:ident => $wire:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The string written to the API.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $wire, )+
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::contract::UnknownName;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $( $wire => Ok($name::$variant), )+
                    _ => Err($crate::contract::UnknownName { what: $what, value: s.to_owned() }),
                }
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                self.as_str()
            }
        }
    };
}

pub(crate) use string_enum;
