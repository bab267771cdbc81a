//! The operator console in a real browser: headless Chromium driven through ChromeDriver
//! (both from the system's packages; `scripts/test` installs them). It signs in with a token,
//! sees a new task appear, watches one move `working → input_required → completed` without a
//! reload (htmx polling under the strict CSP), and cancels one with a reason. Screenshots of
//! each step go to `$CARGO_TARGET_TMPDIR/console-screenshots/`.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;
use taskgate_tests::eventually;

use super::console::console_stack;

const PATIENCE: Duration = Duration::from_secs(30);

/// ChromeDriver on a free port, killed when dropped.
struct Driver {
    child: tokio::process::Child,
    port: u16,
}

impl Driver {
    async fn start() -> Self {
        let binary = which("chromedriver").expect("chromedriver is not installed: run scripts/test, which installs it");
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = tokio::process::Command::new(binary)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("chromedriver starts");
        let http = reqwest::Client::builder().no_proxy().build().unwrap();
        eventually(PATIENCE, "chromedriver to be ready", || async {
            let status = http.get(format!("http://127.0.0.1:{port}/status")).send().await.ok()?;
            let body: serde_json::Value = status.json().await.ok()?;
            (body["value"]["ready"] == true).then_some(())
        })
        .await;
        Self { child, port }
    }

    async fn browser(&self) -> Client {
        let chromium = which("chromium").or_else(|| which("chromium-browser")).expect("chromium is not installed");
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": chromium,
                // Root in CI needs --no-sandbox; small /dev/shm in containers needs the last.
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,900", "--disable-dev-shm-usage"],
            }),
        );
        ClientBuilder::rustls()
            .expect("a WebDriver client")
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{}", self.port))
            .await
            .expect("a Chromium session")
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|dir| PathBuf::from(dir).join(program)).find(|p| p.is_file())
}

fn shots() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn screenshot(browser: &Client, name: &str) {
    let png = browser.screenshot().await.expect("a screenshot");
    std::fs::write(shots().join(format!("{name}.png")), png).unwrap();
}

/// The text of the element `css`, once it exists.
async fn text(browser: &Client, css: &str) -> Option<String> {
    browser.find(Locator::Css(css)).await.ok()?.text().await.ok()
}

/// Waits until the element `css` reads `want`: the page changes by itself, with no reload.
async fn wait_text(browser: &Client, css: &str, want: &str) {
    eventually(PATIENCE, &format!("{css} to read {want:?}"), || async {
        (text(browser, css).await.as_deref() == Some(want)).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_signs_in_watches_a_task_live_and_cancels_one() {
    // A worker publishes the tools and stops: the first task stays `working` until another
    // starts (its tools stay listed for the catalogue's TTL).
    let mut stack = console_stack(0).await;
    let first = stack.add_worker(&["--catalogue-ttl-ms", "600000"]).await;
    stack.workers[first].kill().await;
    let base = stack.client(0).base().to_owned();
    let alice = stack.client_as(0, "key-alice");
    let driver = Driver::start().await;
    let browser = driver.browser().await;

    // Sign in with a token.
    browser.goto(&format!("{base}/console/")).await.unwrap();
    browser.find(Locator::Css("#token")).await.unwrap().send_keys("key-op").await.unwrap();
    screenshot(&browser, "1-sign-in").await;
    browser.find(Locator::Css("form[action='/console/login'] button")).await.unwrap().click().await.unwrap();
    wait_text(&browser, "h1", "Overview").await;

    // A task created now appears in the open list by itself.
    browser.goto(&format!("{base}/console/tasks")).await.unwrap();
    let task = alice.create_task("generate_report", json!({"size": "small"})).await;
    let link = format!("a[href='/console/tasks/{task}']");
    eventually(PATIENCE, "the new task in the list", || async { browser.find(Locator::Css(&link)).await.ok() }).await;
    screenshot(&browser, "2-task-list").await;

    // Its page follows it live: working, then input_required once a worker runs it, then
    // completed once the client answers.
    // (Followed rather than clicked: the list replaces its rows every two seconds.)
    let href = browser.find(Locator::Css(&link)).await.unwrap().attr("href").await.unwrap().unwrap();
    browser.goto(&format!("{base}{href}")).await.unwrap();
    wait_text(&browser, "#state", "working").await;
    stack.add_worker(&[]).await;
    wait_text(&browser, "#state", "input_required").await;
    screenshot(&browser, "3-input-required").await;
    alice.update_task(&task, json!({"approve_outline": {"action": "accept", "content": {"approved": true}}})).await;
    wait_text(&browser, "#state", "completed").await;
    let result = text(&browser, "#result").await.unwrap();
    assert!(result.contains("Generated small report"), "{result}");
    screenshot(&browser, "4-completed").await;

    // Cancel a running one, with a reason; the audit entry shows in its timeline.
    let running = alice.create_task("sleep", json!({"ms": 60_000})).await;
    stack.wait_until_held(&running, PATIENCE).await;
    browser.goto(&format!("{base}/console/tasks/{running}")).await.unwrap();
    browser.find(Locator::Css("#cancel-reason")).await.unwrap().send_keys("runaway job").await.unwrap();
    browser.find(Locator::Css("#cancel")).await.unwrap().click().await.unwrap();
    wait_text(&browser, "#state", "cancelled").await;
    let timeline = text(&browser, "#timeline").await.unwrap();
    assert!(
        timeline.contains("cancel requested") && timeline.contains("ops/op") && timeline.contains("runaway job"),
        "{timeline}"
    );
    screenshot(&browser, "5-cancelled").await;

    browser.close().await.unwrap();
}
