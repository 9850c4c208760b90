//! A small W3C WebDriver client over reqwest, enough to drive headless
//! Chromium through chromedriver: sessions, navigation, finding elements by
//! CSS, clicking, reading text and attributes, and screenshots. The protocol
//! is JSON over HTTP (https://www.w3.org/TR/webdriver2/); every failure
//! carries the driver's own error and message.

use base64::Engine as _;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The key under which the protocol returns an element reference.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";

/// How long waits for the page poll before failing.
pub const WAIT: Duration = Duration::from_secs(15);

/// Where the browser and its driver are, or why they cannot be used.
pub struct Browser {
    pub chromium: PathBuf,
    pub chromedriver: PathBuf,
}

impl Browser {
    /// `SKEIN_CHROMIUM` / `SKEIN_CHROMEDRIVER`, else Debian's paths, else
    /// the names on `PATH`.
    pub fn find() -> Result<Browser, String> {
        let chromium = locate(
            "SKEIN_CHROMIUM",
            &["/usr/bin/chromium", "/usr/bin/chromium-browser"],
            &["chromium", "chromium-browser", "google-chrome"],
        );
        let chromedriver = locate(
            "SKEIN_CHROMEDRIVER",
            &["/usr/bin/chromedriver"],
            &["chromedriver"],
        );
        match (chromium, chromedriver) {
            (Some(chromium), Some(chromedriver)) => Ok(Browser {
                chromium,
                chromedriver,
            }),
            (chromium, chromedriver) => Err(format!(
                "headless Chromium is needed for the web view's browser test, but {} missing: \
                 install Debian's `chromium` and `chromium-driver` (scripts/setup does: \
                 `apt-get install -y chromium chromium-driver`), or point SKEIN_CHROMIUM and \
                 SKEIN_CHROMEDRIVER at them",
                match (chromium.is_none(), chromedriver.is_none()) {
                    (true, true) => "chromium and chromedriver are",
                    (true, false) => "chromium is",
                    _ => "chromedriver is",
                }
            )),
        }
    }
}

fn locate(variable: &str, paths: &[&str], names: &[&str]) -> Option<PathBuf> {
    if let Some(path) = std::env::var_os(variable).filter(|value| !value.is_empty()) {
        let path = PathBuf::from(path);
        return path.is_file().then_some(path);
    }
    if let Some(path) = paths.iter().map(Path::new).find(|path| path.is_file()) {
        return Some(path.to_path_buf());
    }
    let search = std::env::var_os("PATH")?;
    names.iter().find_map(|name| {
        std::env::split_paths(&search)
            .map(|dir| dir.join(name))
            .find(|path| path.is_file())
    })
}

/// A running chromedriver, stopped on drop.
pub struct Driver {
    child: Child,
    pub base: String,
}

impl Driver {
    pub async fn start(browser: &Browser, client: &reqwest::Client) -> Driver {
        let port = free_port();
        let child = Command::new(&browser.chromedriver)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|error| {
                panic!("cannot start {}: {error}", browser.chromedriver.display())
            });
        let driver = Driver {
            child,
            base: format!("http://127.0.0.1:{port}"),
        };
        let started = Instant::now();
        loop {
            if let Ok(response) = client.get(format!("{}/status", driver.base)).send().await
                && let Ok(status) = response.json::<Value>().await
                && status["value"]["ready"] == true
            {
                return driver;
            }
            assert!(
                started.elapsed() < WAIT,
                "chromedriver did not become ready on port {port}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("a free loopback port")
}

/// One browser session.
pub struct Session {
    client: reqwest::Client,
    url: String,
}

/// A reference to an element of the current page.
#[derive(Clone, Debug)]
pub struct Element(String);

impl Session {
    pub async fn new(driver: &Driver, browser: &Browser, client: &reqwest::Client) -> Session {
        let capabilities = json!({
            "capabilities": {
                "alwaysMatch": {
                    "browserName": "chrome",
                    "goog:chromeOptions": {
                        "binary": browser.chromium,
                        "args": [
                            "--headless=new",
                            "--no-sandbox",
                            "--disable-dev-shm-usage",
                            "--disable-gpu",
                            "--no-first-run",
                            "--window-size=1440,1000",
                            "--lang=en-GB",
                        ],
                    },
                },
            },
        });
        let reply = call(
            client,
            reqwest::Method::POST,
            &format!("{}/session", driver.base),
            Some(capabilities),
        )
        .await;
        let id = reply["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session id in {reply}"))
            .to_string();
        Session {
            client: client.clone(),
            url: format!("{}/session/{id}", driver.base),
        }
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        call(
            &self.client,
            reqwest::Method::POST,
            &format!("{}{path}", self.url),
            Some(body),
        )
        .await
    }

    async fn get(&self, path: &str) -> Value {
        call(
            &self.client,
            reqwest::Method::GET,
            &format!("{}{path}", self.url),
            None,
        )
        .await
    }

    pub async fn goto(&self, url: &str) {
        self.post("/url", json!({ "url": url })).await;
    }

    pub async fn find_all(&self, css: &str) -> Vec<Element> {
        let found = self
            .post(
                "/elements",
                json!({ "using": "css selector", "value": css }),
            )
            .await;
        found
            .as_array()
            .map(|list| list.iter().filter_map(element).collect())
            .unwrap_or_default()
    }

    /// The first element matching `css`, waiting for it to appear.
    pub async fn wait_for(&self, css: &str) -> Element {
        let started = Instant::now();
        loop {
            if let Some(found) = self.find_all(css).await.into_iter().next() {
                return found;
            }
            if started.elapsed() > WAIT {
                let page = self.text_of_page().await;
                panic!("no element matches `{css}` after {WAIT:?}; the page shows:\n{page}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Wait until the element matching `css` shows text containing `needle`.
    pub async fn wait_for_text(&self, css: &str, needle: &str) -> String {
        let started = Instant::now();
        loop {
            // The page may re-render between finding the element and reading
            // it; a stale element is looked up again on the next round.
            let found = self.find_all(css).await.into_iter().next();
            let text = match &found {
                Some(found) => self.text_unless_stale(found).await,
                None => None,
            };
            if let Some(text) = text {
                if text.contains(needle) {
                    return text;
                }
                if started.elapsed() > WAIT {
                    panic!("`{css}` never showed `{needle}`; it shows:\n{text}");
                }
            } else if started.elapsed() > WAIT {
                panic!("no element matches `{css}` after {WAIT:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn click(&self, element: &Element) {
        self.post(&format!("/element/{}/click", element.0), json!({}))
            .await;
    }

    /// The element's text, or `None` when the page has replaced it.
    async fn text_unless_stale(&self, element: &Element) -> Option<String> {
        let url = format!("{}/element/{}/text", self.url, element.0);
        let reply: Value = self
            .client
            .get(&url)
            .send()
            .await
            .unwrap_or_else(|error| panic!("GET {url}: {error}"))
            .json()
            .await
            .unwrap_or_else(|error| panic!("GET {url}: the reply is not JSON: {error}"));
        match reply["value"]["error"].as_str() {
            Some("stale element reference") => None,
            Some(error) => panic!("GET {url} failed: {error} — {}", reply["value"]["message"]),
            None => Some(reply["value"].as_str().unwrap_or_default().to_string()),
        }
    }

    pub async fn text(&self, element: &Element) -> String {
        let value = self.get(&format!("/element/{}/text", element.0)).await;
        value.as_str().unwrap_or_default().to_string()
    }

    pub async fn attribute(&self, element: &Element, name: &str) -> Option<String> {
        let value = self
            .get(&format!("/element/{}/attribute/{name}", element.0))
            .await;
        value.as_str().map(str::to_string)
    }

    pub async fn displayed(&self, element: &Element) -> bool {
        self.get(&format!("/element/{}/displayed", element.0))
            .await
            .as_bool()
            .unwrap_or(false)
    }

    /// Run a script in the page and return its value.
    pub async fn execute(&self, script: &str, args: Value) -> Value {
        self.post("/execute/sync", json!({ "script": script, "args": args }))
            .await
    }

    pub async fn text_of_page(&self) -> String {
        self.execute(
            "return document.body ? document.body.innerText : '';",
            json!([]),
        )
        .await
        .as_str()
        .unwrap_or_default()
        .to_string()
    }

    /// Save a PNG screenshot of the viewport.
    pub async fn screenshot(&self, path: &Path) {
        let encoded = self.get("/screenshot").await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(encoded.as_str().expect("a base64 screenshot"))
            .expect("valid base64");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(path, png).unwrap();
    }

    pub async fn close(self) {
        let _ = self.client.delete(&self.url).send().await;
    }
}

fn element(value: &Value) -> Option<Element> {
    value[ELEMENT_KEY]
        .as_str()
        .map(|id| Element(id.to_string()))
}

/// One protocol call: the reply's `value`, or a panic with the driver's error.
async fn call(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    body: Option<Value>,
) -> Value {
    let mut request = client.request(method.clone(), url);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request
        .send()
        .await
        .unwrap_or_else(|error| panic!("{method} {url}: {error}"));
    let status = response.status();
    let reply: Value = response
        .json()
        .await
        .unwrap_or_else(|error| panic!("{method} {url}: the reply is not JSON: {error}"));
    if !status.is_success() {
        panic!(
            "{method} {url} failed ({status}): {} — {}",
            reply["value"]["error"], reply["value"]["message"]
        );
    }
    reply["value"].clone()
}
