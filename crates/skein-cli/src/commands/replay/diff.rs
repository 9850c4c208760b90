//! The word diff `skein replay` prints of an original and a replayed
//! answer: the words each lacks of the other, marked as `git diff
//! --word-diff` marks them.

/// Past this many cells of the comparison table, the differing middle of
/// two texts is marked changed as a whole (as the web view's compare does).
const MAX_DIFF_CELLS: usize = 4_000_000;

/// A run of a text's words, marked when the other text lacks them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Segment {
    pub text: String,
    pub changed: bool,
}

/// The word-level differences of two texts, as the web view's compare
/// draws them (`diff.js`): the longest common subsequence of their words,
/// after trimming what both begin and end with; each text as runs of
/// kept and changed words (whitespace joins the run around it).
pub(super) fn word_diff(a: &str, b: &str) -> (Vec<Segment>, Vec<Segment>) {
    let x = tokens(a);
    let y = tokens(b);
    let mut start = 0;
    while start < x.len() && start < y.len() && x[start] == y[start] {
        start += 1;
    }
    let (mut end_x, mut end_y) = (x.len(), y.len());
    while end_x > start && end_y > start && x[end_x - 1] == y[end_y - 1] {
        end_x -= 1;
        end_y -= 1;
    }
    let mut kept_x = vec![true; x.len()];
    let mut kept_y = vec![true; y.len()];
    let (n, m) = (end_x - start, end_y - start);
    if n.saturating_mul(m) > MAX_DIFF_CELLS {
        kept_x[start..end_x].fill(false);
        kept_y[start..end_y].fill(false);
    } else if n > 0 || m > 0 {
        let width = m + 1;
        let mut lengths = vec![0u32; (n + 1) * width];
        for i in (0..n).rev() {
            for j in (0..m).rev() {
                lengths[i * width + j] = if x[start + i] == y[start + j] {
                    lengths[(i + 1) * width + j + 1] + 1
                } else {
                    lengths[(i + 1) * width + j].max(lengths[i * width + j + 1])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < n || j < m {
            if i < n && j < m && x[start + i] == y[start + j] {
                i += 1;
                j += 1;
            } else if j >= m
                || (i < n && lengths[(i + 1) * width + j] >= lengths[i * width + j + 1])
            {
                kept_x[start + i] = false;
                i += 1;
            } else {
                kept_y[start + j] = false;
                j += 1;
            }
        }
    }
    (segments(&x, &kept_x), segments(&y, &kept_y))
}

/// Words and the whitespace between them: joined, the text again.
fn tokens(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut begin = 0;
    let mut space = None;
    for (at, c) in text.char_indices() {
        let is_space = c.is_whitespace();
        if space.is_some_and(|was| was != is_space) {
            out.push(&text[begin..at]);
            begin = at;
        }
        space = Some(is_space);
    }
    if begin < text.len() {
        out.push(&text[begin..]);
    }
    out
}

/// Runs of kept and changed tokens; whitespace joins the run around it.
fn segments(tokens: &[&str], kept: &[bool]) -> Vec<Segment> {
    let mut out: Vec<Segment> = Vec::new();
    for (token, kept) in tokens.iter().zip(kept) {
        let blank = token.trim().is_empty();
        let changed = !kept && !blank;
        match out.last_mut() {
            Some(last) if blank || last.changed == changed => last.text.push_str(token),
            _ => out.push(Segment {
                text: (*token).to_string(),
                changed,
            }),
        }
    }
    out
}

/// A text with the words the other lacks between `open` and `close`
/// (`[-gone-]`, `{+new+}`, as `git diff --word-diff` writes them).
pub(super) fn marked(segments: &[Segment], open: &str, close: &str) -> String {
    let mut out = String::new();
    for segment in segments {
        if !segment.changed {
            out.push_str(&segment.text);
            continue;
        }
        let word = segment.text.trim_end();
        out.push_str(open);
        out.push_str(word);
        out.push_str(close);
        out.push_str(&segment.text[word.len()..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_word_diff_marks_what_the_other_text_lacks() {
        let (a, b) = word_diff(
            "Your hotel is called Hotel Lutetia.",
            "Your hotel is called the Hotel de la Lumière.",
        );
        let marked = |segments: &[Segment]| -> Vec<String> {
            segments
                .iter()
                .filter(|s| s.changed)
                .map(|s| s.text.trim().to_string())
                .collect()
        };
        assert_eq!(marked(&a), vec!["Lutetia."]);
        assert_eq!(marked(&b), vec!["the", "de la Lumière."]);
        let joined: String = b.iter().map(|s| s.text.as_str()).collect();
        assert_eq!(joined, "Your hotel is called the Hotel de la Lumière.");
        let (same, _) = word_diff("a  b", "a  b");
        assert!(same.iter().all(|s| !s.changed));
    }

    #[test]
    fn changed_words_are_marked_as_git_marks_them() {
        let (a, b) = word_diff("called Hotel Lutetia.", "called the Hotel Lumière.");
        assert_eq!(marked(&a, "[-", "-]"), "called Hotel [-Lutetia.-]");
        assert_eq!(marked(&b, "{+", "+}"), "called {+the+} Hotel {+Lumière.+}");
    }
}
