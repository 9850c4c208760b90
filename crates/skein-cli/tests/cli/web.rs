//! The web view end to end: a database filled by the `skein` binary (a
//! conversation, a fork, a tool loop, a message that looks like markup),
//! `skein serve` on a free loopback port, and headless Chromium driven over
//! WebDriver through the pages a person would use. Screenshots land in
//! `target/web-screenshots/` for CI to keep.
//!
//! Without Chromium and chromedriver the test says so loudly and passes,
//! except under CI (`CI` set), where it fails: CI must never skip it.

use crate::serve::Server;
use crate::webdriver::{Browser, Driver, Session};
use serde_json::{Value, json};
use skein_testkit::Cli;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

const MARKUP: &str = "<img src=x data-injected=1> <b>not bold</b> & <script>no</script>";

pub(crate) fn skein_json(db: &Path, args: &[&str]) -> Value {
    Cli::new(crate::BIN, db).json(args)
}

/// `target/web-screenshots`, found from this test binary's path
/// (`target/debug/deps/web-…`), so it follows CARGO_TARGET_DIR.
pub(crate) fn screenshots() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let target = exe
        .ancestors()
        .nth(3)
        .expect("the test binary lives in target/PROFILE/deps");
    target.join("web-screenshots")
}

/// The browser, or `None` after saying loudly why the test is skipped
/// (never under CI, where a missing browser fails the test).
pub(crate) fn browser_or_skip(test: &str) -> Option<Browser> {
    match Browser::find() {
        Ok(browser) => Some(browser),
        Err(problem) if std::env::var_os("CI").is_some() => panic!("{problem}"),
        Err(problem) => {
            // Straight to the process's stderr: the test harness captures
            // `eprintln!` of passing tests, and this must be seen.
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "\n!!!!!!!!!!\n!! SKIPPED the browser test {test}: {problem}\n!!!!!!!!!!\n"
            );
            None
        }
    }
}

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The window widths the page must fit, from a small laptop to a large
/// screen.
const WIDTHS: [u32; 4] = [800, 1000, 1400, 2560];

/// At each of [`WIDTHS`], by the page's own measurements: the document is
/// no wider than the window, and no panel (the listing's frame, the tree,
/// the top bar) scrolls sideways; with `row`, that tree row still shows its
/// message text. A screenshot of each, then back to the usual size.
async fn fits_every_width(page: &Session, shots: &Path, view: &str, row: Option<&str>) {
    for width in WIDTHS {
        page.resize(width, 1000).await;
        let measured = page
            .execute(
                "const root = document.documentElement;\
                 const wide = [...document.querySelectorAll('.table-frame, .tree, #top, main')]\
                   .filter((e) => e.offsetParent !== null && e.scrollWidth > e.clientWidth + 1)\
                   .map((e) => `${e.id || e.className} ${e.scrollWidth} > ${e.clientWidth}`);\
                 const row = arguments[0] && document.querySelector(arguments[0]);\
                 const text = row && row.querySelector('.preview');\
                 return { scroll: root.scrollWidth, inner: window.innerWidth, wide,\
                   text: text ? text.getBoundingClientRect().width : null,\
                   rowWidth: row ? row.getBoundingClientRect().width : null };",
                vec![row.map_or(Value::Null, |row| json!(row))],
            )
            .await;
        page.screenshot(&shots.join(format!("{view}-{width}.png")))
            .await;
        assert!(
            measured["scroll"].as_i64().unwrap() <= measured["inner"].as_i64().unwrap(),
            "{view} at {width}: the page is wider than the window: {measured}"
        );
        assert_eq!(measured["wide"], json!([]), "{view} at {width}: {measured}");
        if row.is_some() {
            let text = measured["text"].as_f64().unwrap();
            assert!(
                text >= 120.0,
                "{view} at {width}: the row's text is {text} px wide: {measured}"
            );
        }
    }
    page.resize(1440, 1000).await;
}

#[test]
fn the_web_view_shows_the_graph_in_a_real_browser() {
    let Some(browser) = browser_or_skip("of the web view") else {
        return;
    };

    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("skein.db");
    let first = skein_json(
        &db,
        &[
            "prompt",
            "-s",
            "You are terse.",
            "--name",
            "capitals",
            "What is the capital of France?",
        ],
    );
    let conversation = first["conversation"].as_str().unwrap().to_string();
    let fork_point = first["node"].as_str().unwrap().to_string();
    let main_head = skein_json(&db, &["prompt", "-c", "And of Italy?"])["node"]
        .as_str()
        .unwrap()
        .to_string();
    let fork = skein_json(
        &db,
        &[
            "fork",
            &fork_point[..12],
            "--name",
            "what-if",
            "And of Portugal?",
        ],
    );
    let fork_head = fork["node"].as_str().unwrap().to_string();
    let markup = skein_json(&db, &["prompt", "--cid", &conversation, MARKUP]);
    let markup_head = markup["node"].as_str().unwrap().to_string();
    let tools_model = format!(
        "scripted:{}",
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/tools.toml")
            .display()
    );
    let tooled = skein_json(
        &db,
        &[
            "prompt",
            "-m",
            &tools_model,
            "-T",
            "skein_version",
            "--name",
            "tooling",
            "which version?",
        ],
    );
    let tooled_conversation = tooled["conversation"].as_str().unwrap().to_string();
    // No name: the page calls it by its first prompt.
    let unnamed = skein_json(&db, &["prompt", "Which river runs through Paris?"]);
    let unnamed = unnamed["conversation"].as_str().unwrap().to_string();

    let server = Server::start(&db, &[]);
    skein::providers::http::install_crypto_provider();
    runtime().block_on(async {
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let driver = Driver::start(&browser, &client).await;
        let page = Session::new(&driver, &browser).await;
        let shots = screenshots();

        // The conversations, newest first.
        let started = std::time::Instant::now();
        page.goto(&format!("{}/", server.base())).await;
        page.wait_for("#conversations tbody tr").await;
        eprintln!("conversation list shown {:?} after navigation", started.elapsed());
        let rows = page.find_all("#conversations tbody tr").await;
        assert_eq!(rows.len(), 4, "capitals, what-if, tooling, unnamed");
        let list = page.text(&page.wait_for("#conversations").await).await;
        for name in ["capitals", "what-if", "tooling"] {
            assert!(list.contains(name), "{name} listed in:\n{list}");
        }
        assert!(list.contains(&fork_point[..12]), "the fork's origin node is shown");
        let title = page
            .text(&page.wait_for(&format!("#conversations tr[data-conversation-id='{unnamed}'] td.name")).await)
            .await;
        assert_eq!(title, "Which river runs through Paris?", "titled by its first prompt");
        page.screenshot(&shots.join("conversations.png")).await;

        fits_every_width(&page, &shots, "conversations-first", None).await;

        // A filter that matches nothing says so.
        let filter = page.wait_for("#filter").await;
        page.type_into(&filter, "nothing-is-called-this").await;
        let nothing = page.wait_for_text("#filter-empty", "No conversation").await;
        assert!(nothing.contains("nothing-is-called-this"), "{nothing}");
        assert!(page.find_all("#conversations tbody tr:not([hidden])").await.is_empty());
        page.type_into(&filter, "what-if").await;
        assert_eq!(page.find_all("#conversations tbody tr:not([hidden])").await.len(), 1);
        assert!(!page.displayed(&page.wait_for("#filter-empty").await).await);
        page.type_into(&filter, "").await;

        // Open the family from the list.
        let link = page
            .wait_for(&format!("#conversations tr[data-conversation-id='{conversation}'] td.name a"))
            .await;
        page.click(&link).await;
        page.wait_for(&format!("#family-view[data-conversation-id='{conversation}']"))
            .await;
        let title = page.text(&page.wait_for("#family-title").await).await;
        assert!(title.contains("capitals"), "{title}");
        let heads = page
            .find_all(&format!("#tree .node-row[data-node-id='{markup_head}'] .head-mark[data-conversation-id='{conversation}']"))
            .await;
        assert_eq!(heads.len(), 1, "the conversation's head is marked");
        assert!(
            page.find_all(&format!("#tree .node-row[data-node-id='{main_head}']"))
                .await
                .len()
                == 1
        );

        // The fork starts collapsed; expand it.
        let fork_branch = "#tree .branch[data-kind='fork']";
        let toggle = page
            .wait_for(&format!("{fork_branch} > .branch-head > .toggle"))
            .await;
        assert_eq!(page.attribute(&toggle, "aria-expanded").await.as_deref(), Some("false"));
        let fork_row = page
            .wait_for(&format!("{fork_branch} .node-row[data-node-id='{fork_head}']"))
            .await;
        assert!(!page.displayed(&fork_row).await, "a collapsed fork hides its messages");
        let label = page.text(&page.wait_for(&format!("{fork_branch} .branch-label")).await).await;
        assert_eq!(label, "what-if");
        page.click(&toggle).await;
        assert_eq!(page.attribute(&toggle, "aria-expanded").await.as_deref(), Some("true"));
        assert!(page.displayed(&fork_row).await, "the expanded fork shows its messages");

        // Click the fork's answer: its parts and the run that produced it.
        page.click(&fork_row).await;
        page.wait_for(&format!("#details[data-node-id='{fork_head}']")).await;
        let parts = page.wait_for_text("#parts", "And of Portugal?").await;
        assert!(parts.contains("echo:"), "{parts}");
        let runs = page.wait_for_text("#runs", "succeeded").await;
        assert!(runs.contains("echo"), "the model: {runs}");
        // A turn that recorded no sources and offered no tools: a rerun
        // would have nothing to leave out, so none is offered.
        page.wait_for("#actions button[data-action='regenerate']").await;
        assert!(
            page.find_all("#actions button[data-action='rerun']").await.is_empty(),
            "Re-run without… offered on a turn without sources"
        );
        assert!(runs.contains("No tools offered"), "{runs}");
        let input = page.text(&page.wait_for("#runs .run .input-tokens").await).await;
        assert!(input.parse::<u64>().is_ok(), "input tokens shown: {input}");
        assert!(
            page.execute("return location.hash;", vec![]).await.as_str().unwrap().ends_with(&fork_head),
            "the selection is in the address, so it can be shared and reloaded"
        );
        page.screenshot(&shots.join("family.png")).await;

        // The 12 digits the CLI prints select the message as its full id
        // does, and the breadcrumb names it.
        page.goto(&format!("{}/#/c/{conversation}/n/{}", server.base(), &fork_head[..12])).await;
        page.wait_for(&format!("#tree .node-row.selected[data-node-id='{fork_head}']")).await;
        page.wait_for(&format!("#details[data-node-id='{fork_head}']")).await;
        let crumb = page.wait_for_text("#crumbs", &fork_head[..12]).await;
        assert!(crumb.contains("capitals"), "{crumb}");

        // Model output that looks like markup is shown as text.
        let markup_row = page
            .wait_for(&format!("#tree .node-row[data-node-id='{markup_head}']"))
            .await;
        page.click(&markup_row).await;
        page.wait_for(&format!("#details[data-node-id='{markup_head}']")).await;
        let shown = page.wait_for_text("#parts", "<img src=x").await;
        assert!(shown.contains(MARKUP), "{shown}");
        assert!(page.find_all("#view img, #view b, #view script[src], [data-injected]").await.is_empty());

        // A tool loop: the call, its arguments, and the tools the run offered.
        page.goto(&format!("{}/#/c/{tooled_conversation}", server.base())).await;
        let call_row = page.wait_for("#tree .node-row[data-role='assistant']").await;
        page.click(&call_row).await;
        let parts = page.wait_for_text("#parts", "skein_version").await;
        assert!(parts.contains("tool call"), "{parts}");
        let runs = page.wait_for_text("#runs", "Tools offered (1)").await;
        assert!(runs.contains("skein_version"), "{runs}");
        let result_row = page.wait_for("#tree .node-row[data-role='tool']").await;
        page.click(&result_row).await;
        let result = page.wait_for_text("#parts", "tool result").await;
        assert!(result.contains(env!("CARGO_PKG_VERSION")), "{result}");

        // Compare the main line with the fork, from their common ancestor.
        page.goto(&format!("{}/#/c/{conversation}", server.base())).await;
        let go = page.wait_for("#compare-go").await;
        page.click(&go).await;
        page.wait_for("#compare-view").await;
        let ancestor = page.wait_for_text("#compare-ancestor", "Shared history").await;
        assert!(ancestor.contains(&fork_point[..12]), "{ancestor}");
        assert!(ancestor.contains("3 messages"), "{ancestor}");
        let left = page.find_all(".compare-cell[data-side='a']").await;
        let right = page.find_all(".compare-cell[data-side='b']").await;
        assert!(!left.is_empty() && left.len() == right.len());
        let a_text = page.text(&left[0]).await;
        let b_text = page.text(&right[0]).await;
        assert!(a_text.contains("And of Italy?"), "{a_text}");
        assert!(b_text.contains("And of Portugal?"), "{b_text}");
        page.screenshot(&shots.join("compare.png")).await;

        // The word diff the comparison uses, on the page's own module: words
        // one side lacks are marked, the texts are given back whole, and two
        // long texts that differ throughout (6.25 million word pairs, past
        // the bound) are marked as one changed run rather than compared
        // word by word.
        let diff = page
            .execute_async(
                "const done = arguments[arguments.length - 1];\
                 import('/assets/diff.js').then(({ wordDiff }) => {\
                   const a = Array.from({ length: 2500 }, (_, i) => `a${i}`).join(' ');\
                   const b = Array.from({ length: 2500 }, (_, i) => `b${i}`).join(' ');\
                   const big = wordDiff(`same ${a} end`, `same ${b} end`);\
                   const small = wordDiff('the quick brown fox jumps', 'the slow brown fox');\
                   const whole = (segs) => segs.map((s) => s.text).join('');\
                   const changed = (segs) => segs.filter((s) => s.changed).map((s) => s.text);\
                   done({\
                     whole: whole(big.a) === `same ${a} end` && whole(big.b) === `same ${b} end`\
                       && whole(small.a) === 'the quick brown fox jumps',\
                     big: changed(big.a).length, bigFirst: big.a[0].text,\
                     a: changed(small.a), b: changed(small.b),\
                   });\
                 }, (error) => done({ error: String(error) }));",
                vec![],
            )
            .await;
        assert_eq!(diff["whole"], true, "{diff}");
        assert_eq!(diff["big"], 1, "{diff}");
        assert_eq!(diff["bigFirst"], "same ", "{diff}");
        assert_eq!(diff["a"], json!(["quick", "jumps"]), "{diff}");
        assert_eq!(diff["b"], json!(["slow"]), "{diff}");

        // An unknown conversation is a clear message, not a blank page.
        page.goto(&format!("{}/#/c/0123456789abcdef", server.base())).await;
        let error = page.wait_for_text("#error", "no conversation starts with").await;
        assert!(error.contains("0123456789abcdef"), "{error}");

        // More conversations than one page of the list: the rest load on
        // demand, each exactly once.
        let store = skein::Store::open(&db).unwrap();
        for n in 0..1000 {
            store
                .create_conversation(skein::store::NewConversation {
                    name: Some(format!("bulk-{n}")),
                    ..Default::default()
                })
                .unwrap();
        }
        page.goto(&format!("{}/?reload#/", server.base())).await;
        let more = page.wait_for("#load-more").await;
        let count = page.text(&page.wait_for("#list-count").await).await;
        assert!(count.contains("1000 most recently updated"), "{count}");
        assert_eq!(page.find_all("#conversations tbody tr").await.len(), 1000);
        page.click(&more).await;
        let count = page.wait_for_text("#list-count", "1004 conversations").await;
        assert!(!count.contains("more"), "{count}");
        let ids = page
            .execute(
                "return [...document.querySelectorAll('#conversations tbody tr')].map((row) => row.dataset.conversationId);",
                vec![],
            )
            .await;
        let ids: Vec<&str> = ids.as_array().unwrap().iter().map(|id| id.as_str().unwrap()).collect();
        let unique: std::collections::HashSet<&&str> = ids.iter().collect();
        assert_eq!((ids.len(), unique.len()), (1004, 1004), "every conversation once");
        assert!(ids.contains(&conversation.as_str()), "the oldest came with the second page");
        assert!(page.find_all("#load-more").await.is_empty(), "nothing more to load");

        // The same first question asked again: the echo model answers it
        // alike, so the lookalike shares the family's first messages. It is
        // shown as sharing, not as a fork or a continuation.
        let lookalike = skein_json(
            &db,
            &["prompt", "-s", "You are terse.", "--name", "lookalike", "What is the capital of France?"],
        );
        skein_json(&db, &["prompt", "-c", "And of Spain?"]);
        let lookalike = lookalike["conversation"].as_str().unwrap().to_string();
        page.goto(&format!("{}/#/c/{conversation}", server.base())).await;
        let sharing = page
            .wait_for(&format!("#tree .branch[data-kind='shares'][data-conversation-id='{lookalike}']"))
            .await;
        let badge = page.text(&page.wait_for("#tree .branch[data-kind='shares'] .badge.kind-shares").await).await;
        assert_eq!(badge, "shares messages");
        let listed = page
            .find_all(&format!("#members li[data-relation='shares'][data-conversation-id='{lookalike}']"))
            .await;
        assert_eq!(listed.len(), 1, "listed as sharing messages");
        assert!(
            page.find_all(&format!("#members li[data-relation='member'][data-conversation-id='{lookalike}']"))
                .await
                .is_empty(),
            "not a member"
        );
        let toggle = page.wait_for("#tree .branch[data-kind='shares'] > .branch-head > .toggle").await;
        page.click(&toggle).await;
        let mark = page.text(&page.wait_for(&format!("#tree .head-mark.shares[data-conversation-id='{lookalike}']")).await).await;
        assert!(mark.contains("(shares)"), "{mark}");
        assert!(page.displayed(&sharing).await);
        page.screenshot(&shots.join("shares.png")).await;

        // The lookalike's first answer is the family's: the same call made
        // twice, shown once with its count.
        page.goto(&format!("{}/#/c/{conversation}/n/{fork_point}", server.base()))
            .await;
        let repeated = page.wait_for_text("#runs", "identical runs").await;
        assert!(repeated.contains("× 2 identical runs"), "{repeated}");
        assert_eq!(page.find_all("#runs article.run").await.len(), 1);
        assert_eq!(page.find_all("#runs .run-group li").await.len(), 2);

        // A message that heads several conversations, with long names: its
        // row keeps its text, and the page fits every window width.
        for n in 1..=3 {
            skein_json(
                &db,
                &["fork", &markup_head[..12], "--name", &format!("a-fork-with-a-rather-long-name-{n}")],
            );
        }
        page.goto(&format!("{}/?reload#/c/{conversation}", server.base())).await;
        let row = format!("#tree .node-row[data-node-id='{markup_head}']");
        page.wait_for(&format!("{row} .head-mark:nth-of-type(4)")).await;
        fits_every_width(&page, &shots, "family", Some(&row)).await;
        page.goto(&format!("{}/?reload#/", server.base())).await;
        page.wait_for("#conversations tbody tr").await;
        fits_every_width(&page, &shots, "conversations", None).await;

        page.close().await;
        eprintln!("screenshots in {}", shots.display());
    });
}

/// A TCP relay in front of a server that keeps a copy of everything either
/// side sent, to show what a browser really sent and was answered.
struct Tap {
    address: std::net::SocketAddr,
    to_server: Arc<Mutex<Vec<u8>>>,
    to_client: Arc<Mutex<Vec<u8>>>,
}

impl Tap {
    fn start(target: String) -> Tap {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let tap = Tap {
            address: listener.local_addr().unwrap(),
            to_server: Arc::default(),
            to_client: Arc::default(),
        };
        let (to_server, to_client) = (tap.to_server.clone(), tap.to_client.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let Ok(server) = std::net::TcpStream::connect(&target) else {
                    continue;
                };
                relay(
                    client.try_clone().unwrap(),
                    server.try_clone().unwrap(),
                    to_server.clone(),
                );
                relay(server, client, to_client.clone());
            }
        });
        tap
    }

    fn seen(log: &Mutex<Vec<u8>>) -> String {
        String::from_utf8_lossy(&log.lock().unwrap()).into_owned()
    }
}

fn relay(mut from: std::net::TcpStream, mut to: std::net::TcpStream, log: Arc<Mutex<Vec<u8>>>) {
    use std::io::{Read, Write};
    std::thread::spawn(move || {
        let mut buffer = [0u8; 8192];
        loop {
            match from.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    log.lock().unwrap().extend_from_slice(&buffer[..n]);
                    if to.write_all(&buffer[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown(std::net::Shutdown::Write);
    });
}

/// The cross-site attack on the recording proxy, in a real browser: a page
/// served from another loopback origin (127.0.0.2) runs
/// `fetch(proxy, {mode: "no-cors", headers: {"Content-Type": "text/plain"}})`,
/// which a browser sends without asking. The proxy must refuse it: nothing
/// recorded, the upstream model (and so the operator's credential) never
/// called. A program's request through the same proxy still goes through.
#[test]
fn a_page_of_another_origin_cannot_make_the_proxy_call_its_model() {
    use wiremock::matchers::{method, path};
    use wiremock::{Mock, MockServer, ResponseTemplate};
    let Some(browser) = browser_or_skip("of cross-site writes") else {
        return;
    };
    skein::providers::http::install_crypto_provider();
    let runtime = runtime();
    let upstream = runtime.block_on(async {
        let upstream = MockServer::start().await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({
                "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-test",
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": "Hello from upstream."}}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
            })))
            .mount(&upstream)
            .await;
        upstream
    });
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("skein.db");
    let upstream_url = format!("{}/v1", upstream.uri());
    let server = Server::start_with_env(
        &db,
        &["--proxy", "-m", "openai:gpt-test"],
        &[
            ("OPENAI_BASE_URL", upstream_url.as_str()),
            ("OPENAI_API_KEY", "sk-operator-credential"),
        ],
    );
    let tap = Tap::start(server.address.clone());
    let target = format!("http://{}/v1/chat/completions", tap.address);

    runtime.block_on(async {
        let attacker = MockServer::builder()
            .listener(std::net::TcpListener::bind("127.0.0.2:0").unwrap())
            .start()
            .await;
        let page_html = format!(
            r#"<!doctype html><title>elsewhere</title><p id="outcome">pending</p>
<script>
fetch({target:?}, {{
  method: "POST", mode: "no-cors", headers: {{"Content-Type": "text/plain"}},
  body: JSON.stringify({{messages: [{{role: "user", content: "spend the operator's credit"}}]}})
}}).then(() => {{ document.getElementById("outcome").textContent = "sent"; }},
         (error) => {{ document.getElementById("outcome").textContent = "failed: " + error; }});
</script>"#
        );
        Mock::given(method("GET"))
            .and(path("/"))
            .respond_with(ResponseTemplate::new(200).set_body_raw(page_html, "text/html"))
            .mount(&attacker)
            .await;

        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let driver = Driver::start(&browser, &client).await;
        let page = Session::new(&driver, &browser).await;
        page.goto(&format!("{}/", attacker.uri())).await;
        // An opaque response resolves the fetch: the request went and came back.
        page.wait_for_text("#outcome", "sent").await;
        page.close().await;

        let sent = Tap::seen(&tap.to_server);
        assert!(
            sent.starts_with("POST /v1/chat/completions"),
            "the browser sent:\n{sent}"
        );
        let origin = format!("origin: {}", attacker.uri());
        assert!(
            sent.to_ascii_lowercase().contains(&origin),
            "{origin} in:\n{sent}"
        );
        let answered = Tap::seen(&tap.to_client);
        assert!(
            answered.starts_with("HTTP/1.1 403"),
            "the proxy answered:\n{answered}"
        );
        let upstream_calls = upstream.received_requests().await.unwrap();
        assert!(
            upstream_calls.is_empty(),
            "the model was called: {upstream_calls:?}"
        );
        let store = skein::Store::open(&db).unwrap();
        assert!(
            store.list_conversations(10).unwrap().is_empty(),
            "nothing recorded"
        );
        assert!(store.recent_runs(10).unwrap().is_empty(), "no run recorded");

        // A program (no Origin, a JSON body) through the same proxy is
        // served, with the operator's credential.
        let reply: Value = client
            .post(&target)
            .header("content-type", "application/json")
            .body(r#"{"model": "x", "messages": [{"role": "user", "content": "hi"}]}"#)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(
            reply["choices"][0]["message"]["content"], "Hello from upstream.",
            "{reply}"
        );
        let upstream_calls = upstream.received_requests().await.unwrap();
        assert_eq!(upstream_calls.len(), 1);
        assert_eq!(
            upstream_calls[0].headers["authorization"],
            "Bearer sk-operator-credential"
        );
        assert_eq!(store.list_conversations(10).unwrap().len(), 1);
    });
}

/// The proxy and the web view on one server: a page left open on the
/// conversation list shows conversations the proxy records, and their
/// growth, without being reloaded, whichever API the client speaks.
#[test]
fn proxied_turns_show_in_the_open_conversation_list() {
    let Some(browser) = browser_or_skip("of proxied turns in the list") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("skein.db");
    let server = Server::start(&db, &["--proxy", "-m", "echo"]);
    skein::providers::http::install_crypto_provider();
    runtime().block_on(async {
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let driver = Driver::start(&browser, &client).await;
        let page = Session::new(&driver, &browser).await;
        page.goto(&format!("{}/", server.base())).await;
        page.wait_for_text("#list-view", "No conversations yet")
            .await;
        let send = |path: &str, body: Value, name: Option<&str>| {
            let mut request = client
                .post(format!("{}{path}", server.base()))
                .header("content-type", "application/json")
                .body(body.to_string());
            if let Some(name) = name {
                request = request.header("x-skein-conversation-name", name);
            }
            async move {
                let response = request.send().await.unwrap();
                assert_eq!(response.status(), 200);
                response.json::<Value>().await.unwrap()
            }
        };
        let first = send(
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "first"}]}),
            Some("from a client"),
        )
        .await;
        let answer = first["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_string();
        page.wait_for_text("#conversations", "from a client").await;
        send(
            "/v1/chat/completions",
            json!({"messages": [
                {"role": "user", "content": "first"},
                {"role": "assistant", "content": answer},
                {"role": "user", "content": "second"}
            ]}),
            None,
        )
        .await;
        page.wait_for_text("#conversations", "\"second\"").await;
        send(
            "/v1/messages",
            json!({"max_tokens": 20, "messages": [{"role": "user", "content": "from claude"}]}),
            None,
        )
        .await;
        let list = page.wait_for_text("#conversations", "from claude").await;
        assert_eq!(
            page.find_all("#conversations tbody tr").await.len(),
            2,
            "{list}"
        );
        page.screenshot(&screenshots().join("proxied.png")).await;
        page.close().await;
    });
}

/// The id of the tree's row of `role` whose preview contains `text`.
async fn row_id(page: &Session, role: &str, text: &str) -> String {
    page.wait_for_text("#tree", text).await;
    let id = page
        .execute(
            "return [...document.querySelectorAll(`#tree .node-row[data-role='${arguments[0]}']`)]\
               .filter((row) => row.textContent.includes(arguments[1]))\
               .map((row) => row.dataset.nodeId)[0] || null;",
            vec![json!(role), json!(text)],
        )
        .await;
    id.as_str()
        .unwrap_or_else(|| panic!("no {role} row shows {text:?}"))
        .to_string()
}

/// Click an action button of the selected message and wait for its form.
async fn open_action(page: &Session, action: &str) {
    let button = page
        .wait_for(&format!("#actions button[data-action='{action}']"))
        .await;
    page.click(&button).await;
    page.wait_for(&format!(
        "#action-form [data-action='{action}'], #action-form .rerun-form"
    ))
    .await;
}

/// The page's note of the action that landed last, once it is `what`:
/// the message it made and how many chunks of it streamed. Read in one
/// script, since the page redraws the note as the family refreshes.
async fn landed(page: &Session, what: &str) -> (Option<String>, u64) {
    page.wait_for(&format!("#activity[data-what='{what}']"))
        .await;
    let note = page
        .execute(
            "const note = document.querySelector(`#activity[data-what='${arguments[0]}']`);\
             return note ? [note.dataset.node || null, Number(note.dataset.deltas || 0)] : null;",
            vec![json!(what)],
        )
        .await;
    let node = note[0].as_str().map(str::to_string);
    (node, note[1].as_u64().unwrap_or(0))
}

/// The workbench in a real browser: every action at a message, through
/// the server's turn layer, each seen landing in the open family without a
/// reload; a rerun without a source and its verdict on the turn; the two
/// branches compared word by word; a search that lands on its message.
#[test]
fn the_workbench_acts_on_the_graph_in_a_real_browser() {
    let Some(browser) = browser_or_skip("of the workbench") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("skein.db");
    let first = skein_json(
        &db,
        &[
            "prompt",
            "-s",
            "You are terse.",
            "--source",
            "weather=heavy rain all week",
            "--source",
            "budget=200 euros",
            "--name",
            "capitals",
            "What is the capital of France?",
        ],
    );
    let conversation = first["conversation"].as_str().unwrap().to_string();
    let france_answer = first["node"].as_str().unwrap().to_string();
    let italy_answer = skein_json(&db, &["prompt", "-c", "And of Italy?"])["node"]
        .as_str()
        .unwrap()
        .to_string();

    let server = Server::start(&db, &[]);
    skein::providers::http::install_crypto_provider();
    runtime().block_on(async {
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let driver = Driver::start(&browser, &client).await;
        let page = Session::new(&driver, &browser).await;
        let shots = screenshots();

        // Open the family.
        page.goto(&format!("{}/#/c/{conversation}", server.base())).await;
        page.wait_for(&format!("#family-view[data-conversation-id='{conversation}']"))
            .await;
        page.screenshot(&shots.join("workbench-family.png")).await;

        // Edit a user message and fork: a new branch from its parent, the
        // reply streamed, the family redrawn with it and the reply selected.
        let italy = row_id(&page, "user", "And of Italy?").await;
        page.goto(&format!("{}/#/c/{conversation}/n/{italy}", server.base())).await;
        page.wait_for(&format!("#details[data-node-id='{italy}']")).await;
        open_action(&page, "edit").await;
        let text = page.wait_for("#action-text").await;
        assert_eq!(
            page.execute("return document.querySelector('#action-text').value;", vec![])
                .await,
            "And of Italy?",
            "the form starts from the message's text"
        );
        page.type_into(&text, "And of Spain?").await;
        page.type_into(&page.wait_for("#action-name").await, "spain").await;
        let model = page.execute("return document.querySelector('#action-model').value;", vec![]).await;
        assert_eq!(model, "echo", "the picker defaults to the conversation's model");
        page.click(&page.wait_for("#action-submit").await).await;
        let (spain_answer, deltas) = landed(&page, "edit").await;
        let spain_answer = spain_answer.expect("the edit made a reply");
        assert!(deltas >= 1, "the reply streamed in {deltas} chunks");
        page.wait_for(&format!("#tree .node-row[data-node-id='{spain_answer}']")).await;
        page.wait_for(&format!("#details[data-node-id='{spain_answer}']")).await;
        let parts = page.wait_for_text("#parts", "And of Spain?").await;
        assert!(parts.contains("echo:"), "{parts}");
        let label = page
            .wait_for_text("#tree .branch[data-kind='fork'] .branch-label", "spain")
            .await;
        assert_eq!(label, "spain");
        let original = page.find_all(&format!("#tree .node-row[data-node-id='{italy_answer}']")).await;
        assert_eq!(original.len(), 1, "the edited message's old branch stays");
        page.screenshot(&shots.join("workbench-edit.png")).await;

        // Regenerate that reply with other options: a sibling beside it.
        open_action(&page, "regenerate").await;
        page.type_into(&page.wait_for("#action-options").await, "max_tokens=3").await;
        page.click(&page.wait_for("#action-submit").await).await;
        let (regenerated, _) = landed(&page, "regenerate").await;
        let regenerated = regenerated.expect("the regeneration made a reply");
        assert_ne!(regenerated, spain_answer, "a new reply, not the same one");
        page.wait_for(&format!("#tree .node-row[data-node-id='{regenerated}']")).await;
        page.wait_for(&format!("#details[data-node-id='{regenerated}']")).await;
        let runs = page.wait_for_text("#runs", "max_tokens=3").await;
        assert!(runs.contains("echo"), "{runs}");
        page.wait_for(&format!("#tree .node-row[data-node-id='{spain_answer}']")).await;
        page.screenshot(&shots.join("workbench-regenerate.png")).await;

        // Reply at a head: it continues that conversation (and says so);
        // at a message that heads nothing it would branch.
        page.goto(&format!("{}/#/c/{conversation}/n/{france_answer}", server.base()))
            .await;
        open_action(&page, "reply").await;
        page.wait_for_text("#action-form .intro", "starts a new branch")
            .await;
        page.goto(&format!("{}/#/c/{conversation}/n/{spain_answer}", server.base()))
            .await;
        page.wait_for(&format!("#details[data-node-id='{spain_answer}']")).await;
        open_action(&page, "reply").await;
        page.wait_for_text("#action-form .intro", "Continues spain").await;
        page.type_into(&page.wait_for("#action-text").await, "And of Greece?").await;
        page.click(&page.wait_for("#action-submit").await).await;
        let (greece, _) = landed(&page, "reply").await;
        let greece = greece.expect("the reply made a message");
        page.wait_for(&format!(
            "#tree .node-row[data-node-id='{greece}'] .head-mark"
        ))
        .await;
        let note = page.wait_for_text("#activity", "Replied").await;
        assert!(note.contains(" in conversation "), "it continued: {note}");

        // Fork with a name and no message: the new conversation's family
        // opens, its head at the message forked from.
        open_action(&page, "fork").await;
        page.type_into(&page.wait_for("#action-name").await, "greek-fork").await;
        page.click(&page.wait_for("#action-submit").await).await;
        page.wait_for_text("#family-title", "greek-fork").await;
        page.wait_for(&format!("#tree .node-row[data-node-id='{greece}'] .head-mark.focus"))
            .await;

        // Re-run the first turn without a source: the verdict is attached
        // to the turn in the tree; then fork from the counterfactual.
        page.goto(&format!("{}/#/c/{conversation}/n/{france_answer}", server.base())).await;
        page.wait_for(&format!("#details[data-node-id='{france_answer}']")).await;
        open_action(&page, "rerun").await;
        page.wait_for(".source-box:not([disabled])").await;
        let chosen = page
            .execute(
                "const boxes = [...document.querySelectorAll('.source-box:not([disabled])')];\
                 const box = boxes.find((b) => b.parentElement.textContent.includes('weather')) || boxes[0];\
                 box.click(); return box.dataset.sourceId;",
                vec![],
            )
            .await;
        let chosen = chosen.as_str().unwrap().to_string();
        page.click(&page.wait_for("#action-submit").await).await;
        let result = page.wait_for("#rerun-result").await;
        let verdict = page.attribute(&result, "data-verdict").await.unwrap();
        assert!(!verdict.is_empty());
        let shown = page.wait_for_text("#rerun-result", &chosen).await;
        assert!(shown.contains(&verdict), "{shown}");
        landed(&page, "rerun").await;
        let attached = page
            .wait_for_text("#tree .branch[data-rerun] .branch-head", &verdict)
            .await;
        assert!(attached.contains("without"), "the ablation is shown: {attached}");
        page.screenshot(&shots.join("workbench-rerun.png")).await;
        page.type_into(&page.wait_for("#rerun-fork-name").await, "counterfactual").await;
        let fork = page.wait_for(".action-rerun-fork button[type='submit']").await;
        page.click(&fork).await;
        landed(&page, "rerun fork").await;
        page.wait_for_text("#members", "counterfactual").await;

        // Compare the edited branch with the original: the changed words
        // are highlighted on each side.
        page.goto(&format!("{}/#/c/{conversation}", server.base())).await;
        page.wait_for(&format!("#family-view[data-conversation-id='{conversation}']")).await;
        page.execute(
            "location.hash = `#/compare/${arguments[0]}/${arguments[1]}`;",
            vec![json!(italy_answer), json!(spain_answer)],
        )
        .await;
        page.wait_for("#compare-view").await;
        let left = page.wait_for_text(".compare-cell[data-side='a'] mark.diff", "Italy").await;
        let right = page.wait_for_text(".compare-cell[data-side='b'] mark.diff", "Spain").await;
        assert!(!left.contains("And"), "only the changed words: {left}");
        assert!(!right.contains("And"), "only the changed words: {right}");
        let labels = page.text(&page.wait_for(".compare-cell[data-side='b'] .run-summary").await).await;
        assert!(labels.contains("echo") && labels.contains("tokens"), "{labels}");
        page.screenshot(&shots.join("workbench-compare.png")).await;

        // Search for a word and land on its message.
        let search = page.wait_for("#search").await;
        page.type_into(&search, "Spain").await;
        page.press_enter(&search).await;
        let hit = page
            .wait_for("#search-results .search-result[data-conversation-id]")
            .await;
        let node = page.attribute(&hit, "data-node-id").await.unwrap();
        assert!(page.text(&hit).await.contains("Spain"));
        let marked = page.text(&page.wait_for("#search-results mark.hit").await).await;
        assert_eq!(marked.to_lowercase(), "spain", "the word is marked");
        page.screenshot(&shots.join("workbench-search.png")).await;
        page.click(
            &page
                .wait_for("#search-results .search-result[data-conversation-id] .search-link")
                .await,
        )
        .await;
        page.wait_for(&format!("#tree .node-row.selected[data-node-id='{node}']")).await;
        page.wait_for_text(&format!("#details[data-node-id='{node}'] #parts"), "Spain").await;
        page.screenshot(&shots.join("workbench-search-landed.png")).await;

        // Everything the page did went into the database as nodes and
        // bookmarks: the edit's branch is a conversation of its own.
        let store = skein::Store::open(&db).unwrap();
        let names: Vec<Option<String>> = store
            .list_conversations(20)
            .unwrap()
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert!(names.contains(&Some("spain".into())), "{names:?}");
        assert!(names.contains(&Some("counterfactual".into())), "{names:?}");
        page.close().await;
    });
}

/// A turn another process writes (the `skein` binary, on the same
/// database) shows in an open family and an open list without a reload,
/// through the server's event stream.
#[test]
fn a_turn_from_another_process_appears_in_the_open_page() {
    let Some(browser) = browser_or_skip("of live updates") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("skein.db");
    let first = skein_json(&db, &["prompt", "--name", "live", "First question?"]);
    let conversation = first["conversation"].as_str().unwrap().to_string();
    let server = Server::start(&db, &[]);
    skein::providers::http::install_crypto_provider();
    runtime().block_on(async {
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let driver = Driver::start(&browser, &client).await;
        let page = Session::new(&driver, &browser).await;
        page.goto(&format!("{}/#/c/{conversation}", server.base())).await;
        page.wait_for(&format!("#family-view[data-conversation-id='{conversation}']")).await;
        page.wait_for("#live[data-state='live']").await;

        let started = std::time::Instant::now();
        let answer = skein_json(&db, &["prompt", "--cid", &conversation, "Second question?"]);
        let answer = answer["node"].as_str().unwrap().to_string();
        page.wait_for(&format!("#tree .node-row[data-node-id='{answer}']")).await;
        eprintln!("the other process's turn showed {:?} after it was written", started.elapsed());
        let live = page.wait_for("#live").await;
        assert_eq!(page.attribute(&live, "data-state").await.as_deref(), Some("live"));
        let events: u64 = page.attribute(&live, "data-events").await.unwrap().parse().unwrap();
        assert!(events >= 1, "it came through the event stream");
        page.wait_for(&format!(
            "#tree .node-row[data-node-id='{answer}'] .head-mark[data-conversation-id='{conversation}']"
        ))
        .await;
        page.screenshot(&screenshots().join("live-family.png")).await;

        // The list too: a new conversation from another process.
        page.goto(&format!("{}/#/", server.base())).await;
        page.wait_for_text("#conversations", "live").await;
        skein_json(&db, &["prompt", "--name", "elsewhere", "From another process"]);
        page.wait_for_text("#conversations", "elsewhere").await;
        page.screenshot(&screenshots().join("live-list.png")).await;
        page.close().await;
    });
}

/// A replay comparing two models from the workbench in a real browser:
/// started from the form with a second model to compare with, drawn as a
/// matrix (a row per turn, worst first, a column per model) under each
/// model's totals, and listed once as `× 2 models`.
#[test]
fn a_replay_comparing_models_is_drawn_as_a_matrix_in_a_real_browser() {
    let Some(browser) = browser_or_skip("of a replay comparing models") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("skein.db");
    skein_json(
        &db,
        &["prompt", "-m", "echo", "--name", "rivers", "Name a river."],
    );
    skein_json(&db, &["prompt", "--cid", "rivers", "Name another."]);
    // A second model the server offers: a scripted one of the proxy's
    // table, which answers otherwise (every turn changes on it).
    let rules = dir.path().join("terse.toml");
    std::fs::write(&rules, "[[rules]]\nreply = \"A river.\"\n").unwrap();
    let terse = format!("scripted:{}", rules.display());
    let config = dir.path().join("config.toml");
    std::fs::write(&config, format!("[proxy.models]\nterse = '{terse}'\n")).unwrap();
    let config = config.display().to_string();
    let server = Server::start_with_env(&db, &["-m", "echo"], &[("SKEIN_CONFIG", &config)]);
    skein::providers::http::install_crypto_provider();
    runtime().block_on(async {
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let driver = Driver::start(&browser, &client).await;
        let page = Session::new(&driver, &browser).await;
        let shots = screenshots();

        page.goto(&format!("{}/#/replays/new/rivers", server.base())).await;
        page.wait_for("#replay-form").await;
        let others = page.wait_for("#replay-compare-models").await;
        page.type_into(&others, &terse).await;
        let compare = page.wait_for("#replay-compare").await;
        page.type_into(&compare, "exact").await;
        let submit = page.wait_for("#replay-submit").await;
        page.click(&submit).await;

        page.wait_for("#replay-view[data-finished='true']").await;
        page.wait_for("#replay-matrix").await;
        let heads = page
            .execute(
                "return [...document.querySelectorAll('#replay-matrix thead th')].map((th) => th.textContent);",
                vec![],
            )
            .await;
        assert_eq!(heads, json!(["turn", "echo", terse]));
        let cells = page
            .execute(
                "return [...document.querySelectorAll('#replay-matrix tbody tr')].map((tr) => \
                 [...tr.querySelectorAll('td')].map((td) => td.dataset.result));",
                vec![],
            )
            .await;
        assert_eq!(cells, json!([["held", "changed"], ["held", "changed"]]));
        let models = page
            .execute(
                "return [...document.querySelectorAll('#replay-models tbody tr')].map((tr) => \
                 [tr.dataset.model, ...[...tr.querySelectorAll('td')].slice(0, 4).map((td) => td.textContent)]);",
                vec![],
            )
            .await;
        assert_eq!(
            models,
            json!([["echo", "0", "2", "0", "0"], [terse, "2", "0", "0", "0"]])
        );
        page.screenshot(&shots.join("replay-models.png")).await;

        page.goto(&format!("{}/#/replays", server.base())).await;
        page.wait_for_text("table.replay-list", "2 turns × 2 models")
            .await;
        page.close().await;
    });
}

/// A family replayed three times, in a real browser: each turn's replays
/// fold into one row ("3 replays: 3 changed") that expands to the
/// answers, so the tree stays the family's own; *Expand all* opens them,
/// and the opened tree fits every window width.
#[test]
fn a_family_replayed_three_times_folds_each_turns_replays_in_a_real_browser() {
    let Some(browser) = browser_or_skip("of a family's replays") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("skein.db");
    skein_json(
        &db,
        &["prompt", "-m", "echo", "--name", "rivers", "Name a river."],
    );
    skein_json(&db, &["prompt", "--cid", "rivers", "Name another."]);
    // Three models that each answer otherwise: three answers per turn.
    for (file, reply) in [
        ("terse", "A river."),
        ("wordy", "Rivers abound."),
        ("nile", "The Nile."),
    ] {
        let rules = dir.path().join(format!("{file}.toml"));
        std::fs::write(&rules, format!("[[rules]]\nreply = \"{reply}\"\n")).unwrap();
        let model = format!("scripted:{}", rules.display());
        let replay = Cli::new(crate::BIN, &db).run(&[
            "replay",
            "--family",
            "rivers",
            "-m",
            &model,
            "--compare",
            "exact",
        ]);
        assert_eq!(
            replay.status.code(),
            Some(7),
            "{}",
            String::from_utf8_lossy(&replay.stderr)
        );
    }
    let server = Server::start(&db, &["-m", "echo"]);
    skein::providers::http::install_crypto_provider();
    runtime().block_on(async {
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let driver = Driver::start(&browser, &client).await;
        let page = Session::new(&driver, &browser).await;
        page.goto(&format!("{}/#/c/rivers", server.base())).await;
        page.wait_for_text("details.replay-group > summary", "3 replays: ")
            .await;
        let groups = page
            .execute(
                "return [...document.querySelectorAll('details.replay-group')].map((g) => \
                 [g.open, g.querySelector('.replay-group-label').textContent, \
                  g.querySelectorAll('section.branch[data-replay]').length]);",
                vec![],
            )
            .await;
        assert_eq!(
            groups,
            json!([
                [false, "3 replays: 3 changed", 3],
                [false, "3 replays: 3 changed", 3]
            ]),
            "a row per turn, folded"
        );
        let rows = page
            .execute(
                "return [...document.querySelectorAll('#tree .node-row')].filter((r) => r.offsetParent !== null).length;",
                vec![],
            )
            .await;
        assert_eq!(rows, json!(4), "only the family's own messages show");
        page.click(&page.wait_for("#expand-all").await).await;
        assert_eq!(
            page.find_all("details.replay-group[open]").await.len(),
            2,
            "expand all opens the replays"
        );
        // Expanded, the replays' branches fit every width.
        page.click(&page.wait_for("#expand-all").await).await;
        fits_every_width(&page, &screenshots(), "family-replays", None).await;
        page.click(&page.wait_for("#collapse-all").await).await;
        assert_eq!(page.find_all("details.replay-group[open]").await.len(), 0);
        page.close().await;
    });
}

/// A replay from the workbench in a real browser: started from a
/// conversation's *Replay…* link with another system prompt, watched until
/// it finishes, its report read (each turn changed, its words marked, the
/// cost shown), labels put on a turn and on the replay's changed turns and
/// taken off, a turn's original opened in its family tree (which draws the
/// replayed answers as branches) and linked back to the replay, the replay listed; the pages fit every width. The form
/// shows what it or the server refuses.
#[test]
fn a_replay_is_started_watched_and_read_in_a_real_browser() {
    let Some(browser) = browser_or_skip("of the replay pages") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("skein.db");
    let first = skein_json(
        &db,
        &["prompt", "-m", "echo", "--name", "rivers", "Name a river."],
    );
    let conversation = first["conversation"].as_str().unwrap().to_string();
    skein_json(&db, &["prompt", "--cid", "rivers", "Name another."]);

    let server = Server::start(&db, &["-m", "echo"]);
    skein::providers::http::install_crypto_provider();
    runtime().block_on(async {
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let driver = Driver::start(&browser, &client).await;
        let page = Session::new(&driver, &browser).await;
        let shots = screenshots();

        page.goto(&format!("{}/#/c/{conversation}", server.base())).await;
        let link = page.wait_for("#replay-family").await;
        page.click(&link).await;
        page.wait_for("#replay-form").await;
        assert_eq!(
            page.execute("return document.querySelector('#replay-conversations').value;", vec![])
                .await,
            conversation.as_str(),
            "the form starts on the conversation"
        );
        let system = page.wait_for("#replay-system").await;
        page.type_into(&system, "Be brief.").await;
        let compare = page.wait_for("#replay-compare").await;
        page.type_into(&compare, "exact").await;
        // What the form or the server refuses is shown on the form.
        let submit = page.wait_for("#replay-submit").await;
        let replace = page.wait_for("#replay-replace-sources").await;
        page.type_into(&replace, "no equals sign").await;
        page.click(&submit).await;
        page.wait_for_text("#replay-error", "ID = new text").await;
        let clear = |id: &str| format!("document.querySelector('#{id}').value = '';");
        page.execute(&clear("replay-replace-sources"), vec![]).await;
        let version = page.wait_for("#replay-prompt-version").await;
        page.type_into(&version, "brief").await;
        page.click(&submit).await;
        page.wait_for_text("#replay-error", "ID@VERSION").await;
        page.execute(&clear("replay-prompt-version"), vec![]).await;
        page.screenshot(&shots.join("replay-new.png")).await;
        page.click(&submit).await;

        page.wait_for("#replay-view[data-finished='true']").await;
        // The turns may render a moment after the replay says it finished.
        page.until(
            "both turns shown as changed",
            "const results = [...document.querySelectorAll('.replay-turn')].map((t) => t.dataset.result);\
             return {ok: results.length === 2 && results.every((r) => r === 'changed'), results};",
            vec![],
        )
        .await;
        page.wait_for_text("#replay-totals", "2 changed").await;
        page.wait_for_text("#replay-cost", "cost ").await;
        page.wait_for_text(".replay-turn .comparator", "decided by exact")
            .await;
        // Echo says whether it had a system prompt: that word is marked on
        // both sides.
        let marked = page
            .execute(
                "const words = (side, kind) => [...document.querySelectorAll(\
                   `.replay-turn [data-side='${side}'] mark.${kind}`)].map((m) => m.textContent.trim());\
                 return [words('original', 'diff-a'), words('replay', 'diff-b')];",
                vec![],
            )
            .await;
        let has = |side: usize, word: &str| {
            marked[side]
                .as_array()
                .unwrap()
                .iter()
                .any(|marked| marked.as_str().unwrap().starts_with(word))
        };
        assert!(has(0, "no") && has(1, "yes"), "{marked}");
        // What changed, the questions re-sent and the conversation's name
        // are on the page; the counts are drawn as a bar, and the bar and
        // the first question are above the fold.
        page.wait_for_text("#replay-change", "echo (model unchanged) · system prompt replaced")
            .await;
        let shown = page
            .execute(
                "const texts = (css) => [...document.querySelectorAll(css)].map((e) => e.textContent);                 const bar = document.querySelector('#replay-bar .results-bar').getBoundingClientRect();                 const question = document.querySelector('.replay-turn .question').getBoundingClientRect();                 return [texts('.replay-turn .question'), texts('.replay-turn .conversation-name'),                   [...document.querySelectorAll('#replay-bar .results-part')].map((p) => [p.dataset.part, p.dataset.count, p.getBoundingClientRect().width > 0]),                   bar.bottom <= innerHeight && question.bottom <= innerHeight];",
                vec![],
            )
            .await;
        assert_eq!(
            shown,
            json!([
                ["asked Name a river.", "asked Name another."],
                ["rivers", "rivers"],
                [["changed", "2", true]],
                true
            ])
        );
        // A label on one turn, then on every changed turn, then off one.
        let name = page.wait_for("#turn-label-0-name").await;
        page.type_into(&name, "keep").await;
        page.click(&page.wait_for("#turn-label-0-add").await).await;
        page.wait_for_text("#turn-label-0-said", "labelled 1 turn").await;
        let name = page.wait_for("#replay-label-name").await;
        page.type_into(&name, "keep").await;
        page.execute("document.querySelector('#replay-label-results').value = 'changed';", vec![])
            .await;
        page.click(&page.wait_for("#replay-label-add").await).await;
        page.wait_for_text("#replay-label-said", "labelled 1 turn").await;
        page.click(&page.wait_for("#turn-label-0-remove").await).await;
        page.wait_for_text("#turn-label-0-said", "unlabelled 1 turn").await;
        page.screenshot(&shots.join("replay.png")).await;
        fits_every_width(&page, &shots, "replay", None).await;

        // The original answer, in its family tree.
        let original = page.wait_for(".replay-turn .original-link").await;
        page.click(&original).await;
        page.wait_for(&format!("#family-view[data-conversation-id='{conversation}']"))
            .await;
        page.wait_for("#details[data-node-id]").await;
        // The replay replaced the system prompt, so its requests are a
        // thread of their own (a root drawn as a replay): its first turn's
        // answer ends that root's line, and the second turn's replayed
        // answer folds into one row at the message it answers, which
        // expands to the branch, linked to the replay.
        page.wait_for_text("details.replay-group > summary", "1 replay: 1 changed")
            .await;
        assert_eq!(
            page.find_all("details.replay-group").await.len(),
            1,
            "one row per replayed turn below the root"
        );
        assert_eq!(
            page.find_all("details.replay-group[open]").await.len(),
            0,
            "folded until asked"
        );
        page.click(&page.wait_for("details.replay-group > summary").await)
            .await;
        page.wait_for_text(
            "details.replay-group[open] section.branch[data-replay] .replay-link",
            "changed",
        )
        .await;
        assert_eq!(
            page.find_all("section.branch[data-replay]").await.len(),
            2,
            "the replay's root and its second turn's answer"
        );
        // ... which links back to the replay.
        let back = page.wait_for("#node-replays .replay-link").await;
        page.click(&back).await;
        page.wait_for("#replay-view[data-finished='true']").await;

        page.goto(&format!("{}/#/replays", server.base())).await;
        page.wait_for_text("#replays tbody tr", "finished").await;
        assert_eq!(page.find_all("#replays tbody tr").await.len(), 1);
        page.wait_for_text("#replays tbody tr", "echo (model unchanged)").await;
        page.wait_for_text("#replays tbody tr", "conversation rivers").await;
        page.wait_for("#replays tbody tr .results-bar .results-changed").await;
        page.screenshot(&shots.join("replays.png")).await;
        fits_every_width(&page, &shots, "replays", None).await;
        page.close().await;
    });
}

/// A replay of a cases file from the workbench's form in a real browser:
/// the file's lines pasted into the form's cases field are stored and
/// replayed, each judged by its own comparators. On a machine without
/// MiniLM (an empty models directory) the server compares with the lexical
/// embedder and says so: on the replay page, in the replay's and a
/// rerun's answers and in a turn's report, as `skein replay` says it on
/// stderr.
#[test]
fn a_cases_file_is_replayed_from_the_form_and_the_embedder_fallback_is_said_in_a_real_browser() {
    let Some(browser) = browser_or_skip("of a replay of cases") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("skein.db");
    let first = skein_json(
        &db,
        &["prompt", "-m", "echo", "--name", "rivers", "Name a river."],
    );
    let answer = first["node"].as_str().unwrap().to_string();
    let second = skein_json(&db, &["prompt", "--cid", "rivers", "Name another."]);
    let cli = Cli::new(crate::BIN, &db);
    cli.ok(&[
        "label",
        "add",
        "rivers",
        &answer,
        second["node"].as_str().unwrap(),
    ]);
    let file = dir.path().join("rivers.jsonl");
    cli.ok(&["label", "export", "rivers", "-o", file.to_str().unwrap()]);
    let cases = std::fs::read_to_string(&file).unwrap();
    let no_models = dir.path().join("no-models");
    std::fs::create_dir_all(&no_models).unwrap();
    let server = Server::start_with_env(
        &db,
        &["-m", "echo"],
        &[("SKEIN_MODELS_DIR", no_models.to_str().unwrap())],
    );
    skein::providers::http::install_crypto_provider();
    runtime().block_on(async {
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let said = |value: &Value| {
            let note = value["embedder_fallback"].as_str().unwrap_or_default();
            note.contains("lexical embedder") && note.contains("skein models pull minilm")
        };
        let report: Value = client
            .get(format!("{}/api/nodes/{answer}/report", server.base()))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert!(said(&report), "a turn's report: {report}");

        let driver = Driver::start(&browser, &client).await;
        let page = Session::new(&driver, &browser).await;
        page.goto(&format!("{}/#/replays", server.base())).await;
        page.click(&page.wait_for("#new-replay > summary").await).await;
        page.wait_for("#replay-form").await;
        page.wait_for("#replay-cases-file").await;
        page.execute(
            "const cases = document.querySelector('#replay-cases'); cases.value = arguments[0];",
            vec![json!(cases)],
        )
        .await;
        fits_every_width(&page, &screenshots(), "replay-cases-form", None).await;
        page.click(&page.wait_for("#replay-submit").await).await;
        page.wait_for("#replay-view[data-finished='true']").await;
        page.until(
            "both cases replayed",
            "const results = [...document.querySelectorAll('.replay-turn')].map((t) => t.dataset.result);\
             return {ok: results.length === 2, results};",
            vec![],
        )
        .await;
        page.wait_for_text("#replay-embedder-note", "skein models pull minilm")
            .await;
        page.wait_for_text("#replay-view .view-head", "2 cases").await;
        let id = page
            .execute("return document.querySelector('#replay-view').dataset.replayId;", vec![])
            .await;
        let id = id.as_str().unwrap();
        let shown: Value = client
            .get(format!("{}/api/replays/{id}", server.base()))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert!(said(&shown), "the replay's page: {shown}");
        assert_eq!(shown["selected"], 2, "{shown}");
        page.screenshot(&screenshots().join("replay-cases.png")).await;
        page.close().await;
    });
}

/// The workbench as `skein serve` runs it, without a browser: the session
/// names the CLI's models, a reply through it is recorded on the CLI's
/// model, a turn another process (`skein prompt`) writes reaches an open
/// `/api/events` stream, and `--read-only` opens the database read-only
/// and refuses every write. On SQLite and, when `SKEIN_TEST_POSTGRES`
/// names a server, on PostgreSQL (two processes on one database).
#[test]
fn the_served_workbench_acts_and_sees_turns_of_other_processes() {
    let dir = tempfile::tempdir().unwrap();
    workbench(&dir.path().join("skein.db").display().to_string());
    #[cfg(feature = "postgres")]
    if let Some(base) = std::env::var("SKEIN_TEST_POSTGRES")
        .ok()
        .filter(|url| !url.is_empty())
    {
        let schema = skein::store::scratch::ScratchSchema::create(&base).unwrap();
        workbench(schema.url());
    }
}

fn workbench(db: &str) {
    let db = Path::new(db);
    let first = skein_json(db, &["prompt", "-m", "echo", "Name a river."]);
    let conversation = first["conversation"].as_str().unwrap().to_string();
    let server = Server::start(db, &["-m", "echo"]);
    skein::providers::http::install_crypto_provider();
    runtime().block_on(async {
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let session: Value = client
            .get(format!("{}/api/session", server.base()))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(session["read_only"], false);
        assert_eq!(session["default_model"], "echo");
        assert!(
            session["models"]
                .as_array()
                .unwrap()
                .iter()
                .any(|model| model["name"] == "echo"),
            "{session}"
        );
        let csrf = session["csrf"].as_str().unwrap().to_string();

        let mut events = client
            .get(format!("{}/api/events", server.base()))
            .send()
            .await
            .unwrap();
        let mut seen = String::new();
        let mut read_until = async |wanted: &str, seen: &mut String| {
            let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
            while !seen.contains(wanted) {
                let chunk = tokio::time::timeout_at(deadline, events.chunk())
                    .await
                    .unwrap_or_else(|_| panic!("no `{wanted}` on /api/events: {seen}"))
                    .unwrap()
                    .expect("the event stream stays open");
                seen.push_str(std::str::from_utf8(&chunk).unwrap());
            }
        };
        read_until("event: ready", &mut seen).await;

        // Another process continues the conversation.
        let second = skein_json(db, &["prompt", "--cid", &conversation, "Name another."]);
        let head = second["node"].as_str().unwrap().to_string();
        read_until(&head, &mut seen).await;
        assert!(seen.contains(&conversation), "{seen}");

        // A reply through the served workbench.
        let response = client
            .post(format!("{}/api/nodes/{}/reply", server.base(), &head[..12]))
            .header("content-type", "application/json")
            .header("x-skein-csrf", &csrf)
            .body(json!({"text": "Name a third."}).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let streamed = response.text().await.unwrap();
        assert!(streamed.contains("event: done"), "{streamed}");
        let done: Value = streamed
            .split("event: done\ndata: ")
            .nth(1)
            .and_then(|rest| rest.lines().next())
            .map(|line| serde_json::from_str(line).unwrap())
            .unwrap();
        assert_eq!(done["conversation"], conversation.as_str());
        let shown = skein_json(db, &["conversations", "-n", "1"]);
        assert_eq!(shown[0]["head"], done["node"], "{shown}");
    });
    drop(server);

    let read_only = Server::start(db, &["--read-only"]);
    runtime().block_on(async {
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let session: Value = client
            .get(format!("{}/api/session", read_only.base()))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(session["read_only"], true);
        let response = client
            .post(format!(
                "{}/api/nodes/{}/fork",
                read_only.base(),
                &first["node"].as_str().unwrap()[..12]
            ))
            .header("content-type", "application/json")
            .header("x-skein-csrf", session["csrf"].as_str().unwrap())
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 403);
        assert!(response.text().await.unwrap().contains("read-only"));
        // A report is a read: it caches nothing in the read-only database.
        let response = client
            .get(format!(
                "{}/api/nodes/{}/report",
                read_only.base(),
                first["node"].as_str().unwrap()
            ))
            .send()
            .await
            .unwrap();
        let status = response.status();
        let report: Value = response.json().await.unwrap();
        assert_eq!(status, 200, "{report}");
        assert_eq!(report["turn"]["index"], 0, "{report}");
    });
}
