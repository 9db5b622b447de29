//! `formatId` and `parseId`: id text in a named form with options (`cosid_core::convert::
//! TextFormat`), the same spec text as `cosid --format` and the C and Python functions.

use crate::error::{check, coded, throwing, type_error, Res};
use crate::raw::{self, made, string_arg, type_name, type_of, Raw};
use cosid_core::convert::{self, TextFormat};
use cosid_core::{ErrorKind, Layout, TimeUnit};
use napi::bindgen_prelude::Unknown;
use napi::{sys, Env, JsValue};
use napi_derive::napi;
use std::ffi::CString;

/// A number property of a layout object, as an integer.
fn field(env: sys::napi_env, obj: sys::napi_value, key: &str, fname: &str) -> Res<f64> {
    let name = CString::new(key).expect("no NUL in a key");
    let mut v = std::ptr::null_mut();
    check!(
        env,
        sys::napi_get_named_property(env, obj, name.as_ptr(), &mut v),
        "napi_get_named_property"
    )?;
    let t = type_of(env, v)?;
    if t != sys::ValueType::napi_number {
        return Err(type_error(format!(
            "{fname}: layout.{key} must be a number, got {}",
            type_name(t)
        )));
    }
    made!(env, 0f64, napi_get_value_double(v))
}

/// `undefined` (the millisecond preset), a preset's name, or an `IdLayout` (`rt.layout`).
fn layout_arg(env: sys::napi_env, v: sys::napi_value, fname: &str) -> Res<Layout> {
    let t = type_of(env, v)?;
    match t {
        sys::ValueType::napi_undefined => Ok(Layout::MILLIS),
        sys::ValueType::napi_string => Ok(convert::preset_layout(&raw::string_value(env, v)?)?),
        sys::ValueType::napi_object => {
            let mut unit_v = std::ptr::null_mut();
            check!(
                env,
                sys::napi_get_named_property(env, v, c"unit".as_ptr(), &mut unit_v),
                "napi_get_named_property"
            )?;
            let name = string_arg(env, unit_v, &format!("{fname}: layout.unit"))?;
            let unit = TimeUnit::from_name(&name).ok_or_else(|| {
                coded(
                    ErrorKind::InvalidArgument,
                    format!("{fname}: layout.unit {name:?} is not a unit; use \"ms\" or \"s\""),
                )
            })?;
            let bits = |key| -> Res<u8> {
                let n = field(env, v, key, fname)?;
                if n.fract() != 0.0 || !(0.0..=64.0).contains(&n) {
                    return Err(coded(
                        ErrorKind::InvalidArgument,
                        format!("{fname}: layout.{key} {n} is not a bit count (0 to 64)"),
                    ));
                }
                Ok(n as u8)
            };
            let epoch = field(env, v, "epochMs", fname)?;
            if epoch.fract() != 0.0 || epoch.abs() > 9.0e15 {
                return Err(coded(
                    ErrorKind::InvalidArgument,
                    format!("{fname}: layout.epochMs {epoch} is not a whole number of ms"),
                ));
            }
            let (ts, node, seq) = (
                bits("timestampBits")?,
                bits("nodeBits")?,
                bits("sequenceBits")?,
            );
            Ok(Layout::new(epoch as i64, unit, ts, node, seq, false)?)
        }
        _ => Err(type_error(format!(
            "{fname}: layout must be a preset name or an IdLayout (rt.layout), got {}",
            type_name(t)
        ))),
    }
}

fn spec_arg(env: sys::napi_env, v: sys::napi_value, fname: &str) -> Res<TextFormat> {
    Ok(TextFormat::parse(&string_arg(
        env,
        v,
        &format!("{fname}: format"),
    )?)?)
}

/// The text of `id` in `format`: `dec`, `hex`, `base62` (`radix62`), `radix36` or `friendly`,
/// with options after commas as `cosid --format` takes them
/// (`radix62,pad-start=false,char-size=10`, `friendly,zone=Asia/Shanghai,pad-start=true`),
/// and in every form `prefix=`, `suffix=` and `date-prefix=yyMMdd` (docs/id-text.md).
/// `layout`: a preset name or `rt.layout` (default `millis`).
#[napi(
    ts_args_type = "id: bigint, format: string, layout?: IdLayout | string",
    ts_return_type = "string"
)]
pub fn format_id(env: Env, id: Unknown, format: Unknown, layout: Unknown) -> napi::Result<Raw> {
    let env = env.raw();
    const F: &str = "formatId(id, format, layout)";
    let r = (|| {
        let id = crate::ops::read_id(env, id.raw(), F)?;
        let f = spec_arg(env, format.raw(), F)?;
        let l = layout_arg(env, layout.raw(), F)?;
        raw::utf8_string(env, &f.format(&l, id)?)
    })();
    throwing(env, r.map(Raw))
}

/// The id that `formatId` wrote as `text` with the same `format` and `layout`; throws
/// `COSID_ERR_INVALID_ARGUMENT` for any other text.
#[napi(
    ts_args_type = "text: string, format: string, layout?: IdLayout | string",
    ts_return_type = "bigint"
)]
pub fn parse_id(env: Env, text: Unknown, format: Unknown, layout: Unknown) -> napi::Result<Raw> {
    let env = env.raw();
    const F: &str = "parseId(text, format, layout)";
    let r = (|| {
        let text = string_arg(env, text.raw(), &format!("{F}: text"))?;
        let f = spec_arg(env, format.raw(), F)?;
        let l = layout_arg(env, layout.raw(), F)?;
        raw::bigint(env, f.parse_id(&l, &text)?)
    })();
    throwing(env, r.map(Raw))
}
