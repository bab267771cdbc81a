use super::*;

fn event(data: &str) -> SseItem {
    SseItem::Event(SseEvent { data: Some(data.to_owned()), ..SseEvent::default() })
}

/// Every way of cutting `body` in two gives the same items as reading it whole.
fn same_at_every_cut(body: &[u8]) -> Vec<SseItem> {
    let whole = decode(body);
    for cut in 0..=body.len() {
        let mut decoder = SseDecoder::default();
        let mut items = Vec::new();
        for part in [&body[..cut], &body[cut..]] {
            decoder.push(part);
            items.extend(std::iter::from_fn(|| decoder.next_item()));
        }
        decoder.finish();
        items.extend(std::iter::from_fn(|| decoder.next_item()));
        assert_eq!(items, whole, "cut at {cut}");
    }
    whole
}

#[test]
fn events_split_across_chunks_arrive_whole() {
    let body = "data: {\"text\":\"caf\u{e9} \u{1f600}\"}\n\ndata: 2\n\n".as_bytes();
    assert_eq!(same_at_every_cut(body), [event("{\"text\":\"caf\u{e9} \u{1f600}\"}"), event("2")]);
}

#[test]
fn one_byte_at_a_time_is_the_same_as_whole() {
    let body = b": hi\r\nevent: a\r\ndata: 1\r\n\r\ndata: 2\r\r";
    let mut decoder = SseDecoder::default();
    let mut items = Vec::new();
    for byte in body {
        decoder.push(std::slice::from_ref(byte));
        items.extend(std::iter::from_fn(|| decoder.next_item()));
    }
    assert_eq!(items, decode(body));
}

#[test]
fn an_event_is_held_until_its_blank_line() {
    let mut decoder = SseDecoder::default();
    decoder.push(b"data: 1\n");
    assert_eq!(decoder.next_item(), None);
    decoder.push(b"\n");
    assert_eq!(decoder.next_item(), Some(event("1")));
    assert_eq!(decoder.next_item(), None);
}

#[test]
fn lf_crlf_and_cr_line_ends_read_alike() {
    for body in ["data: 1\n\ndata: 2\n\n", "data: 1\r\n\r\ndata: 2\r\n\r\n", "data: 1\r\rdata: 2\r\r"] {
        assert_eq!(same_at_every_cut(body.as_bytes()), [event("1"), event("2")], "{body:?}");
    }
}

#[test]
fn a_crlf_cut_between_its_bytes_is_one_line_end() {
    let mut decoder = SseDecoder::default();
    decoder.push(b"data: 1\r");
    decoder.push(b"");
    decoder.push(b"\ndata: 2\r\n\r\n");
    assert_eq!(decoder.next_item(), Some(event("1\n2")));
}

#[test]
fn data_lines_of_one_event_join_with_newlines() {
    let body = b"data: first\ndata:second\ndata\ndata:  two spaces\n\n";
    assert_eq!(same_at_every_cut(body), [event("first\nsecond\n\n two spaces")]);
}

#[test]
fn comments_come_out_in_order_and_do_not_end_an_event() {
    let body = b":\n: keep-alive\ndata: 1\n:between\n\n";
    assert_eq!(
        same_at_every_cut(body),
        [
            SseItem::Comment(String::new()),
            SseItem::Comment(" keep-alive".to_owned()),
            SseItem::Comment("between".to_owned()),
            event("1"),
        ]
    );
}

#[test]
fn id_and_event_fields_are_kept_with_their_event() {
    let body = b"id: 7\nevent: message\ndata: {}\n\ndata: {}\n\nid: a\0b\nevent:\n\n";
    assert_eq!(
        same_at_every_cut(body),
        [
            SseItem::Event(SseEvent {
                event: Some("message".to_owned()),
                id: Some("7".to_owned()),
                data: Some("{}".to_owned())
            }),
            event("{}"),
            // An id holding NUL is ignored; an empty event name is still a field.
            SseItem::Event(SseEvent { event: Some(String::new()), id: None, data: None }),
        ]
    );
}

#[test]
fn a_final_event_without_its_blank_line_still_arrives() {
    assert_eq!(same_at_every_cut(b"data: 1\n\ndata: 2\n"), [event("1"), event("2")]);
    assert_eq!(same_at_every_cut(b"data: 1\n\ndata: 2"), [event("1"), event("2")]);
    let mut decoder = SseDecoder::default();
    decoder.push(b"data: 2");
    assert_eq!(decoder.next_item(), None, "not before the end");
    decoder.finish();
    assert_eq!(decoder.next_item(), Some(event("2")));
}

#[test]
fn unknown_fields_bare_blank_lines_and_a_bom_are_ignored() {
    let body = "\u{feff}data: 1\n\n\n\nretry: 10\nfoo: bar\n{\"jsonrpc\":\"2.0\"}\n\n".as_bytes();
    assert_eq!(same_at_every_cut(body), [event("1")]);
    assert!(decode(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#).is_empty(), "a JSON body is no event");
}

#[test]
fn data_of_takes_every_event_data_in_order() {
    assert_eq!(data_of(b": ka\ndata: 1\n\nevent: x\n\ndata: 2\n\n"), ["1", "2"]);
}
