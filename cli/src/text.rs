//! Server text made safe for a terminal. A leaf: both the form reader and the printer use it.

/// Server text made safe for a terminal: control characters (escape sequences that could
/// redraw the screen or disguise a URL) are dropped; `keep_lines` keeps newlines and tabs.
pub(crate) fn clean_text(text: &str, keep_lines: bool) -> String {
    text.chars().filter(|c| !c.is_control() || (keep_lines && matches!(c, '\n' | '\t'))).collect()
}

/// One line of server text, safe for a terminal.
pub(crate) fn clean(text: &str) -> String {
    clean_text(text, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_text_cannot_drive_the_terminal() {
        assert_eq!(clean("ok\u{1b}[2J\u{1b}]8;;http://evil\u{7}here\r\n"), "ok[2J]8;;http://evilhere");
        assert_eq!(clean_text("a\n\tb\u{1b}[1m", true), "a\n\tb[1m");
    }
}
