//! `Runtime.create(config)`: a YAML or JSON string, a path to a file, a plain object, or
//! nothing (the embedded default). The JavaScript value is read on the JavaScript thread; files
//! are read and the document interpreted on the creating thread.

use crate::error::{type_error, Res};
use crate::raw::{
    array_length, bigint_value, display, is_array, made, own_properties, string_value, type_name,
    type_of,
};
use cosid_core::Config;
use napi::sys;
use serde_yaml_ng::{Mapping, Number, Value};

/// Deeper than any real configuration; a cycle stops here.
const MAX_DEPTH: usize = 32;

/// A configuration as JavaScript gave it, ready to cross to another thread.
pub(crate) enum Source {
    Default,
    Text(String),
    Document(Value),
}

/// Reads the `config` argument of `Runtime.create`.
pub(crate) fn read(env: sys::napi_env, v: sys::napi_value) -> Res<Source> {
    use sys::ValueType as T;
    match type_of(env, v)? {
        T::napi_undefined | T::napi_null => Ok(Source::Default),
        T::napi_string => Ok(Source::Text(string_value(env, v)?)),
        T::napi_object if !is_array(env, v)? => Ok(Source::Document(to_yaml(env, v, "config", 0)?)),
        t => Err(type_error(format!(
            "Runtime.create(config): config must be a YAML or JSON string, a path to a \
             configuration file, or a plain object like {{ cosid: {{ namespace: 'orders' }} }}; \
             got {}",
            if t == T::napi_object {
                "an array"
            } else {
                type_name(t)
            }
        ))),
    }
}

impl Source {
    /// Interprets the configuration (reads the file if it is a path).
    pub(crate) fn into_config(self) -> Res<Config> {
        match self {
            Source::Default => Ok(Config::embedded_default()?),
            Source::Document(doc) => Ok(Config::from_value(&doc)?),
            Source::Text(text) => Ok(Config::from_text(&text)?),
        }
    }
}

fn to_yaml(env: sys::napi_env, v: sys::napi_value, path: &str, depth: usize) -> Res<Value> {
    use sys::ValueType as T;
    if depth > MAX_DEPTH {
        return Err(type_error(format!(
            "Runtime.create(config): {path} is nested more than {MAX_DEPTH} levels deep (does the \
             object refer to itself?)"
        )));
    }
    Ok(match type_of(env, v)? {
        T::napi_null => Value::Null,
        T::napi_boolean => Value::Bool(made!(env, false, napi_get_value_bool(v))?),
        T::napi_number => {
            let x = made!(env, 0f64, napi_get_value_double(v))?;
            if !x.is_finite() {
                return Err(type_error(format!(
                    "Runtime.create(config): {path} is {x}; give a finite number"
                )));
            }
            if x.fract() == 0.0 && x.abs() < 9_007_199_254_740_992.0 {
                Value::Number(Number::from(x as i64))
            } else {
                Value::Number(Number::from(x))
            }
        }
        T::napi_bigint => {
            let (n, lossless) = bigint_value(env, v)?;
            if !lossless {
                return Err(type_error(format!(
                    "Runtime.create(config): {path} is {}n, which is not an unsigned 64-bit \
                     integer",
                    display(env, v)
                )));
            }
            Value::Number(Number::from(n))
        }
        T::napi_string => Value::String(string_value(env, v)?),
        T::napi_object => {
            if made!(env, false, napi_is_date(v))? {
                let ms = made!(env, 0f64, napi_get_date_value(v))?;
                if !ms.is_finite() {
                    return Err(type_error(format!(
                        "Runtime.create(config): {path} is an invalid Date"
                    )));
                }
                Value::String(cosid_core::time::format_rfc3339_ms(ms as i64))
            } else if is_array(env, v)? {
                let len = array_length(env, v)?;
                let mut seq = Vec::with_capacity(len as usize);
                for i in 0..len {
                    let item = made!(env, napi_get_element(v, i))?;
                    seq.push(to_yaml(env, item, &format!("{path}[{i}]"), depth + 1)?);
                }
                Value::Sequence(seq)
            } else {
                Value::Mapping(mapping(env, v, path, depth)?)
            }
        }
        t => {
            return Err(type_error(format!(
                "Runtime.create(config): {path} is {}; configuration values are strings, numbers, \
                 booleans, null, arrays and plain objects",
                type_name(t)
            )))
        }
    })
}

fn mapping(env: sys::napi_env, v: sys::napi_value, path: &str, depth: usize) -> Res<Mapping> {
    let members = own_properties(env, v)?;
    let mut map = Mapping::with_capacity(members.len());
    for (name, item) in members {
        if type_of(env, item)? == sys::ValueType::napi_undefined {
            // Like JSON.stringify: an undefined member is no member.
            continue;
        }
        let child = format!("{path}.{name}");
        map.insert(Value::String(name), to_yaml(env, item, &child, depth + 1)?);
    }
    Ok(map)
}
