//! Bounds on what an upstream server can make the worker store or do: status texts, input
//! requests and list pages. (Results and errors are capped for every tool, by the runtime.)

/// Largest status message taken from a server (progress, a followed task's status, a question's
/// message), in bytes of UTF-8.
pub(super) const MAX_STATUS_BYTES: usize = 1024;
/// Largest set of input requests of one round (or one held question), as JSON: they are stored
/// with the task until it ends, like the server's `requestState`.
pub(super) const MAX_INPUT_BYTES: usize = 64 * 1024;
/// Pages read of one listing (tools, prompts, resources, templates): a server that always
/// answers with a next cursor cannot keep the worker listing for ever.
pub(super) const MAX_LIST_PAGES: usize = 100;

/// A server's text made fit for a status message: control characters (escape sequences, line
/// breaks) become spaces, and the text is cut, on a character boundary, to
/// [`MAX_STATUS_BYTES`] (an ellipsis marks the cut).
pub(super) fn status_text(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if out.len() > MAX_STATUS_BYTES {
            break;
        }
        out.push(if c.is_control() { ' ' } else { c });
    }
    if out.len() > MAX_STATUS_BYTES {
        let mut end = MAX_STATUS_BYTES - '…'.len_utf8();
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_text_is_cut_on_a_character_boundary_without_control_characters() {
        assert_eq!(status_text("step\n3\u{1b}[31m"), "step 3 [31m");
        let long = "é".repeat(MAX_STATUS_BYTES);
        let cut = status_text(&long);
        assert!(cut.len() <= MAX_STATUS_BYTES && cut.ends_with('…'), "{}", cut.len());
        let exact = "a".repeat(MAX_STATUS_BYTES);
        assert_eq!(status_text(&exact), exact);
    }
}
