//! The workbench's readability, measured in a real browser at the window
//! sizes people use (800×600, 1280×800, 1920×1080, 2560×1440; the replay
//! pages at 800×600, 1280×800 and 1920×1080): the conversation list, a family with a
//! fork, a rerun and three replays, a message's details, the replay list
//! and a replay's page. What is measured is what a reader sees: no text
//! broken inside a word, nothing wider than the window, a whole screen of
//! conversations, the family tree above the fold, the selected message's
//! details in view after a click and not covering the message, a
//! breadcrumb that keeps its ends, replays folded, the kinds of branch
//! drawn apart, and the keys the `?` overlay lists doing what it says.
//! Screenshots of each land in `target/web-screenshots/layout-*.png`.
//!
//! Every wait polls the page (`Session::until`); nothing waits a fixed time.

use crate::serve::Server;
use crate::web::{browser_or_skip, runtime, screenshots, skein_json};
use crate::webdriver::{Driver, Session};
use serde_json::{Value, json};
use skein_testkit::Cli;
use std::path::Path;

/// The window sizes of the list, the family and the details.
const SIZES: [(u32, u32); 4] = [(800, 600), (1280, 800), (1920, 1080), (2560, 1440)];

/// The window sizes of the replay pages.
const REPLAY_SIZES: [(u32, u32); 3] = [(800, 600), (1280, 800), (1920, 1080)];

/// Measures the page. `arguments[0]`: the elements whose text must not
/// break inside a word; `arguments[1]`: the elements that must not scroll
/// sideways. Returns the document's and the window's widths, every line
/// break that falls between two characters of a word (with the text
/// around it), and every element wider than its box.
const MEASURE: &str = r"
const [texts, frames] = arguments;
const breaks = [];
for (const host of document.querySelectorAll(texts)) {
  if (!host.getClientRects().length) continue;
  const walker = document.createTreeWalker(host, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const text = node.data;
    if (!node.parentElement || node.parentElement.closest('pre, select, option, [hidden]')) continue;
    const range = document.createRange();
    let last = null;
    for (let i = 0; i < text.length; i++) {
      range.setStart(node, i);
      range.setEnd(node, i + 1);
      const rects = range.getClientRects();
      if (!rects.length) continue;
      const top = rects[0].top;
      if (last !== null && top > last + 2 && /\S/.test(text[i - 1]) && /\S/.test(text[i])) {
        breaks.push(`${text.slice(Math.max(0, i - 16), i)}⏎${text.slice(i, i + 16)}`);
      }
      last = top;
    }
  }
}
const wide = [...document.querySelectorAll(frames)]
  .filter((e) => e.getClientRects().length && e.scrollWidth > e.clientWidth + 1)
  .map((e) => `${e.id || e.className} ${e.scrollWidth} > ${e.clientWidth}`);
return { document: document.documentElement.scrollWidth, window: innerWidth, breaks, wide };
";

/// The panels that must never scroll sideways.
const FRAMES: &str = "#top, main, .table-frame, .tree, .details, .split, #crumbs > :first-child, #crumbs > :last-child";

/// Measure with [`MEASURE`] and fail on any broken word or overflow.
async fn readable(page: &Session, what: &str, texts: &str) {
    let measured = page
        .execute(MEASURE, vec![json!(texts), json!(FRAMES)])
        .await;
    assert!(
        measured["document"].as_i64().unwrap() <= measured["window"].as_i64().unwrap(),
        "{what}: the page is wider than the window: {measured}"
    );
    assert_eq!(
        measured["wide"],
        json!([]),
        "{what}: wider than its box: {measured}"
    );
    assert_eq!(
        measured["breaks"],
        json!([]),
        "{what}: words broken across lines: {measured}"
    );
}

/// Whether the element `arguments[0]` selects is on screen, under the top
/// bar, and is what a click at its centre would reach (nothing covers it).
const IN_VIEW: &str = r"
const e = document.querySelector(arguments[0]);
if (!e) return { ok: false, missing: arguments[0] };
const r = e.getBoundingClientRect();
const bar = document.querySelector('#top').getBoundingClientRect().bottom;
const x = r.left + Math.min(r.width / 2, 40);
const y = r.top + Math.min(r.height / 2, 12);
const hit = document.elementFromPoint(x, y);
const reached = Boolean(hit && (hit === e || e.contains(hit)));
return { ok: r.top >= bar - 1 && r.top < innerHeight - 24 && r.bottom > r.top && reached,
  top: r.top, bottom: r.bottom, bar, height: innerHeight, reached, hit: hit ? `${hit.tagName}.${hit.className}` : null };
";

async fn in_view(page: &Session, what: &str, css: &str) -> Value {
    page.until(what, IN_VIEW, vec![json!(css)]).await
}

/// `skein replay`, which exits 7 when a turn changed: its report.
fn replay(db: &Path, args: &[&str]) -> Value {
    let output = Cli::new(crate::BIN, db).run(args);
    assert!(
        matches!(output.status.code(), Some(0 | 7)),
        "replay failed: {}",
        skein_testkit::cli::stderr(&output)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn the_workbench_reads_at_every_window_size() {
    let Some(browser) = browser_or_skip("of the workbench's layout") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("skein.db");

    // A family: the first line, a fork, a rerun without a source, and
    // three replays of its first turn.
    let first = skein_json(
        &db,
        &[
            "prompt",
            "-s",
            "You are terse.",
            "--source",
            "weather=heavy rain all week",
            "--name",
            "capitals-of-europe-redact-me",
            "What is the capital of France?",
        ],
    );
    let family = first["conversation"].as_str().unwrap().to_string();
    let france = first["node"].as_str().unwrap().to_string();
    let italy = skein_json(&db, &["prompt", "--cid", &family, "And of Italy?"])["node"]
        .as_str()
        .unwrap()
        .to_string();
    skein_json(
        &db,
        &[
            "fork",
            &france[..12],
            "--name",
            "what-if-portugal",
            "And of Portugal?",
        ],
    );
    skein_json(
        &db,
        &[
            "rerun",
            &france[..12],
            "--ignore",
            "weather",
            "--samples",
            "2",
            "--baseline",
            "--embedder",
            "lexical",
        ],
    );
    let mut replays = Vec::new();
    // Echo cuts its answer at the token limit: three limits, three
    // answers, three branches.
    for limit in ["2", "4", "6"] {
        let report = replay(
            &db,
            &[
                "replay",
                &france[..12],
                "-m",
                "echo",
                "--max-tokens",
                limit,
                "--compare",
                "exact",
                "--format",
                "json",
            ],
        );
        replays.push(report);
    }
    let replay_id = replays[0]["replay"]
        .as_str()
        .expect("the replay's id")
        .to_string();

    // More than a screen of conversations, with long hyphenated names,
    // long previews and a scripted model named by a long path.
    let tools_model = format!(
        "scripted:{}",
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/tools.toml")
            .display()
    );
    // The first, on the scripted model: its answer's run names that model.
    let mut scripted = None;
    for n in 0..18 {
        let name = format!("a-conversation-with-a-long-hyphenated-name-{n:02}");
        let text = format!(
            "Question {n}: which rivers run through the capitals of central Europe, and where do they rise?"
        );
        let model = if n % 3 == 0 {
            tools_model.as_str()
        } else {
            "echo"
        };
        let turn = skein_json(&db, &["prompt", "-m", model, "--name", &name, &text]);
        if n == 0 {
            scripted = Some((
                turn["conversation"].as_str().unwrap().to_string(),
                turn["node"].as_str().unwrap().to_string(),
            ));
        }
    }
    let (scripted, scripted_answer) = scripted.unwrap();

    let server = Server::start(&db, &["-m", "echo"]);
    skein::providers::http::install_crypto_provider();
    runtime().block_on(async {
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let driver = Driver::start(&browser, &client).await;
        let page = Session::new(&driver, &browser).await;
        let shots = screenshots();
        let italy_row = format!("#tree .node-row[data-node-id='{italy}']");

        for (width, height) in SIZES {
            let size = format!("{width}x{height}");
            page.viewport(width, height).await;

            // The list: one line a row, no word broken, nothing wider than
            // the window, and at 1280×800 at least 15 rows on the screen.
            page.goto(&format!("{}/?{size}#/", server.base())).await;
            page.wait_for("#conversations tbody tr").await;
            readable(&page, &format!("the list at {size}"), "#conversations, #crumbs, #top").await;
            let rows = page
                .execute(
                    "const bar = document.querySelector('#top').getBoundingClientRect().bottom;\
                     const rows = [...document.querySelectorAll('#conversations tbody tr')];\
                     const heights = rows.map((r) => Math.round(r.getBoundingClientRect().height));\
                     const seen = rows.filter((r) => { const b = r.getBoundingClientRect();\
                       return b.top >= bar && b.bottom <= innerHeight; }).length;\
                     return { rows: rows.length, seen, tallest: Math.max(...heights), lowest: Math.min(...heights) };",
                    vec![],
                )
                .await;
            assert_eq!(rows["tallest"], rows["lowest"], "the list at {size}: every row one line: {rows}");
            if height >= 800 {
                assert!(rows["seen"].as_u64().unwrap() >= 15, "the list at {size}: {rows}");
            }
            // Cut ids and models are whole in the page (what a copy
            // takes) and in their titles (what hovering shows).
            let cut = page
                .execute(
                    "return [...document.querySelectorAll('#conversations tbody tr')].filter((row) => {\
                       const id = row.querySelector('td.id code.id');\
                       const model = row.querySelector('td.model');\
                       return id.textContent !== row.dataset.conversationId || id.title !== row.dataset.conversationId\
                         || !model.textContent.startsWith(model.title) || model.title === '';\
                     }).map((row) => row.dataset.conversationId);",
                    vec![],
                )
                .await;
            assert_eq!(cut, json!([]), "the list at {size}: rows whose id or model is not whole");
            page.screenshot(&shots.join(format!("layout-list-{size}.png"))).await;

            // The family: the tree above the fold, replays folded, the
            // branch kinds drawn apart.
            page.goto(&format!("{}/?{size}#/c/{family}", server.base())).await;
            page.wait_for(&format!("#family-view[data-conversation-id='{family}']")).await;
            readable(&page, &format!("the family at {size}"), "#crumbs, #family-view .view-head, #tree").await;
            let fold = page
                .execute(
                    "const rows = [...document.querySelectorAll('#tree .node-row')].filter((r) => r.offsetParent !== null);\
                     const row = rows[4].getBoundingClientRect();\
                     return { bottom: row.bottom, height: innerHeight };",
                    vec![],
                )
                .await;
            assert!(
                fold["bottom"].as_f64().unwrap() <= fold["height"].as_f64().unwrap(),
                "the family at {size}: its first five messages are not above the fold: {fold}"
            );
            let branches = page
                .execute(
                    "const kinds = {};\
                     for (const b of document.querySelectorAll('#tree section.branch')) {\
                       const lane = getComputedStyle(b, '::before');\
                       (kinds[b.className.match(/lane-(\\w+)/)[1]] ||= []).push({ collapsed: b.classList.contains('collapsed'),\
                         lane: `${lane.borderLeftStyle} ${lane.borderLeftColor}` });\
                     }\
                     return kinds;",
                    vec![],
                )
                .await;
            let replayed = branches["replay"].as_array().expect("replay branches");
            assert_eq!(replayed.len(), 3, "three replays: {branches}");
            assert!(replayed.iter().all(|b| b["collapsed"] == true), "replays start folded: {branches}");
            let lane = |kind: &str| branches[kind][0]["lane"].as_str().unwrap_or_else(|| panic!("a {kind} branch: {branches}")).to_string();
            let lanes = [lane("root"), lane("fork"), lane("rerun"), lane("replay")];
            for (i, a) in lanes.iter().enumerate() {
                for b in &lanes[i + 1..] {
                    assert_ne!(a, b, "root, fork, rerun and replay lanes are drawn apart: {branches}");
                }
            }
            page.screenshot(&shots.join(format!("layout-family-{size}.png"))).await;

            // A click on the message furthest down the first line: its
            // details come into view and do not cover it, and the
            // breadcrumb keeps its first and last crumbs whole.
            page.click(&page.wait_for(&italy_row).await).await;
            page.wait_for(&format!("#details[data-node-id='{italy}'] #runs")).await;
            in_view(&page, &format!("the details at {size}"), "#details").await;
            in_view(&page, &format!("the selected message at {size}"), &italy_row).await;
            let crumb = page.wait_for_text("#crumbs > :last-child", &italy[..12]).await;
            assert!(crumb.starts_with("message"), "{crumb}");
            readable(&page, &format!("the details at {size}"), "#crumbs, #tree, #node-id, #details dl.facts, #details .run > header").await;
            page.screenshot(&shots.join(format!("layout-details-{size}.png"))).await;

            // k moves to the message above, which stays in view above the
            // details.
            page.press('k').await;
            page.wait_for(&format!("#tree .node-row.selected[data-node-id]:not([data-node-id='{italy}'])")).await;
            in_view(&page, &format!("the message k selected at {size}"), "#tree .node-row.selected").await;
            in_view(&page, &format!("the details after k at {size}"), "#details").await;

            // A run on a model named by a long path: its details fit too.
            page.goto(&format!("{}/?{size}#/c/{scripted}/n/{scripted_answer}", server.base())).await;
            page.wait_for(&format!("#details[data-node-id='{scripted_answer}'] #runs .run")).await;
            in_view(&page, &format!("the scripted run's details at {size}"), "#details").await;
            readable(&page, &format!("the scripted run's details at {size}"), "#node-id, #details dl.facts, #details .run > header").await;
            page.screenshot(&shots.join(format!("layout-details-scripted-{size}.png"))).await;
        }

        // The keys, at 1280×800.
        page.viewport(1280, 800).await;
        page.goto(&format!("{}/?keys#/c/{family}/n/{italy}", server.base())).await;
        page.wait_for(&format!("#details[data-node-id='{italy}'] #actions")).await;
        let selected = "document.querySelector('#tree .node-row.selected')?.dataset.nodeId || null";
        let order = page
            .execute(
                "return [...document.querySelectorAll('#tree .node-row')].filter((r) => r.offsetParent !== null)\
                   .map((r) => r.dataset.nodeId);",
                vec![],
            )
            .await;
        let order: Vec<String> = order.as_array().unwrap().iter().map(|id| id.as_str().unwrap().to_string()).collect();
        let at = order.iter().position(|id| *id == italy).unwrap();
        let selected_is = async |id: &str| {
            page.until(
                &format!("{id} selected"),
                &format!("const id = {selected}; return {{ ok: id === arguments[0], id }};"),
                vec![json!(id)],
            )
            .await;
        };
        page.press('k').await;
        selected_is(&order[at - 1]).await;
        page.wait_for(&format!("#details[data-node-id='{}'] #actions", order[at - 1])).await;
        page.press('j').await;
        selected_is(&italy).await;
        page.wait_for(&format!("#details[data-node-id='{italy}'] #actions")).await;
        // ? shows the keys; Esc hides them.
        page.press('?').await;
        let help = page.wait_for_text("#keys-help:not([hidden])", "reply to the selected message").await;
        for key in ["j", "k", "Enter", "r", "f", "/", "?"] {
            assert!(
                !page.find_all(&format!("#keys-help tr[data-key='{key}']")).await.is_empty(),
                "the overlay lists {key}: {help}"
            );
        }
        page.screenshot(&shots.join("layout-keys-1280x800.png")).await;
        page.press(fantoccini::key::Key::Escape.into()).await;
        page.until(
            "the overlay closed",
            "const help = document.querySelector('#keys-help'); return { ok: help.hidden };",
            vec![],
        )
        .await;
        let focused = "return { ok: document.activeElement && document.activeElement.id === arguments[0],\
                       focused: document.activeElement && document.activeElement.id };";
        // r opens the reply form with its text in focus; Esc leaves it.
        page.press('r').await;
        page.wait_for("#action-form [data-action='reply']").await;
        page.until("r focused the reply's text", focused, vec![json!("action-text")]).await;
        page.press(fantoccini::key::Key::Escape.into()).await;
        page.until("Esc left the field", "return { ok: document.activeElement === document.body };", vec![]).await;
        // f the fork form, with its name in focus.
        page.press('f').await;
        page.wait_for("#action-form [data-action='fork']").await;
        page.until("f focused the fork's name", focused, vec![json!("action-name")]).await;
        page.press(fantoccini::key::Key::Escape.into()).await;
        page.until("Esc left the field", "return { ok: document.activeElement === document.body };", vec![]).await;
        // / the search box.
        page.press('/').await;
        page.until("/ focused the search box", focused, vec![json!("search")]).await;
        page.press(fantoccini::key::Key::Escape.into()).await;
        // Esc again closes the details.
        page.press(fantoccini::key::Key::Escape.into()).await;
        page.until(
            "Esc closed the details",
            "return { ok: location.hash === `#/c/${arguments[0]}` && !document.querySelector('#details[data-node-id]') };",
            vec![json!(family)],
        )
        .await;
        // With nothing selected, j selects the first message; Enter then
        // opens its details (the focus goes there).
        page.press('j').await;
        selected_is(&order[0]).await;
        page.wait_for(&format!("#details[data-node-id='{}'] #actions", order[0])).await;
        page.press(fantoccini::key::Key::Enter.into()).await;
        page.until("Enter opened the details", focused, vec![json!("details")]).await;
        // In the list, j and k move a cursor and Enter opens its
        // conversation.
        page.goto(&format!("{}/?list-keys#/", server.base())).await;
        page.wait_for("#conversations tbody tr").await;
        page.press('j').await;
        page.press('j').await;
        page.press('j').await;
        page.press('k').await;
        let second = page
            .until(
                "the cursor on the second row",
                "const rows = [...document.querySelectorAll('#conversations tbody tr')];\
                 return { ok: rows[1].classList.contains('cursor') && document.querySelectorAll('tr.cursor').length === 1,\
                   id: rows[1].dataset.conversationId };",
                vec![],
            )
            .await;
        let second = second["id"].as_str().unwrap().to_string();
        page.press(fantoccini::key::Key::Enter.into()).await;
        page.wait_for(&format!("#family-view[data-conversation-id='{second}']")).await;

        // The replay pages: the list and a replay's report fit, break no
        // word, and show the question and the counts above the fold.
        for (width, height) in REPLAY_SIZES {
            let size = format!("{width}x{height}");
            page.viewport(width, height).await;
            page.goto(&format!("{}/?{size}#/replays", server.base())).await;
            page.wait_for_text("#replays tbody tr", "finished").await;
            assert_eq!(page.find_all("#replays tbody tr").await.len(), 3);
            readable(&page, &format!("the replays at {size}"), "#replays, #crumbs, #top").await;
            page.screenshot(&shots.join(format!("layout-replays-{size}.png"))).await;

            // Within the page, as a person goes from the list to a replay.
            page.execute("location.hash = `#/replays/${arguments[0]}`;", vec![json!(replay_id)]).await;
            page.wait_for("#replay-view[data-finished='true']").await;
            readable(&page, &format!("the replay at {size}"), "#replay-view, #crumbs, #top").await;
            in_view(&page, &format!("the counts at {size}"), "#replay-bar .results-bar").await;
            in_view(&page, &format!("the question at {size}"), ".replay-turn .question").await;
            page.screenshot(&shots.join(format!("layout-replay-{size}.png"))).await;
        }
        page.close().await;
        eprintln!("screenshots in {}", shots.display());
    });
}
