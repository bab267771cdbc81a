use super::*;

#[test]
fn plain_values_are_trimmed_and_literal() {
    assert_eq!(decode(b"  greet ").unwrap(), "greet");
    assert_eq!(decode(b"=?base64?").unwrap(), "=?base64?");
}

#[test]
fn sentinel_is_decoded_strictly() {
    assert_eq!(decode(encode("héllo").as_bytes()).unwrap(), "héllo");
    assert_eq!(decode(b"=?base64?aGk=?=").unwrap(), "hi");
    assert_eq!(decode(b"=?base64?aGk?=").unwrap_err(), HeaderValueError::BadBase64);
    assert_eq!(decode(b"=?base64?!!!!?=").unwrap_err(), HeaderValueError::BadBase64);
    assert_eq!(decode(b"=?base64?/w==?=").unwrap_err(), HeaderValueError::NotUtf8);
}

#[test]
fn raw_non_ascii_is_refused() {
    assert_eq!(decode("héllo".as_bytes()).unwrap_err(), HeaderValueError::NotPrintable);
    assert_eq!(decode(b"a\x01b").unwrap_err(), HeaderValueError::NotPrintable);
}

#[test]
fn encode_wraps_only_what_needs_it() {
    assert_eq!(encode("tsk_abc"), "tsk_abc");
    assert!(encode(" lead").starts_with("=?base64?"));
    assert!(encode("=?base64?x?=").starts_with("=?base64?"));
}
