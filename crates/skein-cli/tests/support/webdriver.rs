//! Headless Chromium for the browser tests, driven through chromedriver
//! with the `fantoccini` WebDriver client: finding the browser, starting
//! its driver on a free port, and the few waits the tests need on top of
//! the client (an element to appear, an element to show some text). Every
//! failure panics with the driver's own error and what the page showed.

use fantoccini::elements::Element;
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long waits for the page poll before failing: generous, since the
/// machine running the tests may be busy.
pub const WAIT: Duration = Duration::from_secs(20);

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

/// One browser session (a window 1440 pixels wide).
pub struct Session {
    client: Client,
}

impl Session {
    pub async fn new(driver: &Driver, browser: &Browser) -> Session {
        let capabilities = json!({
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
        });
        let Value::Object(capabilities) = capabilities else {
            unreachable!()
        };
        let client = ClientBuilder::new(HttpConnector::new())
            .capabilities(capabilities)
            .connect(&driver.base)
            .await
            .unwrap_or_else(|error| panic!("no WebDriver session at {}: {error}", driver.base));
        Session { client }
    }

    pub async fn goto(&self, url: &str) {
        self.client
            .goto(url)
            .await
            .unwrap_or_else(|error| panic!("navigating to {url}: {error}"));
    }

    pub async fn find_all(&self, css: &str) -> Vec<Element> {
        self.client
            .find_all(Locator::Css(css))
            .await
            .unwrap_or_else(|error| panic!("finding `{css}`: {error}"))
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
                Some(found) => text_unless_stale(found).await,
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
                let page = self.text_of_page().await;
                panic!("no element matches `{css}` after {WAIT:?}; the page shows:\n{page}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn click(&self, element: &Element) {
        element
            .click()
            .await
            .unwrap_or_else(|error| panic!("clicking {element:?}: {error}"));
    }

    /// Replace the text of an input or text area with `text` (clearing
    /// it fires `change`; typing fires `input`).
    pub async fn type_into(&self, element: &Element, text: &str) {
        element
            .clear()
            .await
            .unwrap_or_else(|error| panic!("clearing {element:?}: {error}"));
        if !text.is_empty() {
            element
                .send_keys(text)
                .await
                .unwrap_or_else(|error| panic!("typing into {element:?}: {error}"));
        }
    }

    /// Press Enter in an input (submitting its form).
    pub async fn press_enter(&self, element: &Element) {
        element
            .send_keys(&fantoccini::key::Key::Enter.to_string())
            .await
            .unwrap_or_else(|error| panic!("pressing Enter in {element:?}: {error}"));
    }

    /// Resize the browser window.
    pub async fn resize(&self, width: u32, height: u32) {
        self.client
            .set_window_size(width, height)
            .await
            .unwrap_or_else(|error| panic!("resizing the window: {error}"));
    }

    /// Size the window so that the page's viewport (`innerWidth` ×
    /// `innerHeight`) is `width` × `height`, whatever the browser's own
    /// frame takes.
    pub async fn viewport(&self, width: u32, height: u32) {
        self.resize(width, height).await;
        let inner = self
            .execute("return [innerWidth, innerHeight];", vec![])
            .await;
        let frame = |i: usize, wanted: u32| {
            wanted.saturating_sub(inner[i].as_u64().unwrap_or(u64::from(wanted)) as u32)
        };
        let (extra_width, extra_height) = (frame(0, width), frame(1, height));
        if extra_width > 0 || extra_height > 0 {
            self.resize(width + extra_width, height + extra_height)
                .await;
        }
    }

    /// Press and release one key where the focus is, as a person would
    /// (a character, or a [`fantoccini::key::Key`] as one).
    pub async fn press(&self, key: char) {
        use fantoccini::actions::{InputSource, KeyAction, KeyActions};
        let keys = KeyActions::new("keyboard".to_string())
            .then(KeyAction::Down { value: key })
            .then(KeyAction::Up { value: key });
        self.client
            .perform_actions(keys)
            .await
            .unwrap_or_else(|error| panic!("pressing {key:?}: {error}"));
    }

    /// Run `script` until the object it returns has `ok: true`, and return
    /// that object; after [`WAIT`], fail with the last one and `what`.
    pub async fn until(&self, what: &str, script: &str, args: Vec<Value>) -> Value {
        let started = Instant::now();
        loop {
            let value = self.execute(script, args.clone()).await;
            if value["ok"] == true {
                return value;
            }
            if started.elapsed() > WAIT {
                panic!("{what}: not so after {WAIT:?}; last measured {value}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn text(&self, element: &Element) -> String {
        element
            .text()
            .await
            .unwrap_or_else(|error| panic!("reading {element:?}: {error}"))
    }

    pub async fn attribute(&self, element: &Element, name: &str) -> Option<String> {
        element
            .attr(name)
            .await
            .unwrap_or_else(|error| panic!("reading {name} of {element:?}: {error}"))
    }

    pub async fn displayed(&self, element: &Element) -> bool {
        element
            .is_displayed()
            .await
            .unwrap_or_else(|error| panic!("is {element:?} displayed: {error}"))
    }

    /// Run a script in the page and return its value.
    pub async fn execute(&self, script: &str, args: Vec<Value>) -> Value {
        self.client
            .execute(script, args)
            .await
            .unwrap_or_else(|error| panic!("running {script}: {error}"))
    }

    /// Run an asynchronous script in the page: it calls its last argument
    /// with the value to return.
    pub async fn execute_async(&self, script: &str, args: Vec<Value>) -> Value {
        self.client
            .execute_async(script, args)
            .await
            .unwrap_or_else(|error| panic!("running {script}: {error}"))
    }

    pub async fn text_of_page(&self) -> String {
        self.execute(
            "return document.body ? document.body.innerText : '';",
            vec![],
        )
        .await
        .as_str()
        .unwrap_or_default()
        .to_string()
    }

    /// Save a PNG screenshot of the viewport.
    pub async fn screenshot(&self, path: &Path) {
        let png = self
            .client
            .screenshot()
            .await
            .unwrap_or_else(|error| panic!("screenshot: {error}"));
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(path, png).unwrap();
    }

    pub async fn close(self) {
        let _ = self.client.close().await;
    }
}

/// The element's text, or `None` when the page has replaced it.
async fn text_unless_stale(element: &Element) -> Option<String> {
    match element.text().await {
        Ok(text) => Some(text),
        Err(error) if error.is_stale_element_reference() => None,
        Err(error) => panic!("reading {element:?}: {error}"),
    }
}
