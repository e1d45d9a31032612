"""Drives a compute process's web console in headless Chromium (Debian's
package, through Playwright; tests/console.rs runs it).

    console.py URL SCREENSHOT MARKER

Opens URL, waits for the first render and prints a JSON line with what
it shows (stores listed and up, regions drawn, the first render's time in
ms after navigation start). Then it waits for the running query whose
text holds MARKER (the test starts it on that line), keeps a screenshot,
presses the query's Cancel button and waits for it to leave the list.
Every console message of type error and every uncaught page error is
collected. The last line is a JSON object: the query id cancelled, the
charts drawn, and the errors.
"""

import json
import sys
import time

from playwright.sync_api import sync_playwright

url, screenshot, marker = sys.argv[1], sys.argv[2], sys.argv[3]
errors = []
out = {}
with sync_playwright() as p:
    browser = p.chromium.launch(
        executable_path="/usr/bin/chromium",
        args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
    )
    page = browser.new_page(viewport={"width": 1400, "height": 1100})
    page.on(
        "console",
        lambda m: errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None,
    )
    page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    page.goto(url)
    page.wait_for_function("document.body.dataset.loaded", timeout=15000)
    loaded = {
        "first_render_ms": int(page.evaluate("document.body.dataset.loaded")),
        "stores": page.locator("#stores tbody tr").count(),
        "stores_up": page.locator("#stores tbody td.up").count(),
        "regions_drawn": page.locator("#heat .heat div").count(),
    }
    # The test starts its long query on this line.
    print(json.dumps(loaded), flush=True)
    row = page.locator("#queries tbody tr", has_text=marker).first
    row.wait_for(timeout=60000)
    qid = row.get_attribute("data-query-id")
    out["query_id"] = int(qid)
    row.locator("details summary").click()
    plan = row.locator("details pre").inner_text()
    out["plan_shown"] = "RecursiveQueryExec" in plan and "RegionScanExec" in plan
    # A sample or two for the charts before the picture.
    time.sleep(4.5)
    page.screenshot(path=screenshot, full_page=True)
    row.locator("button.cancel").click()
    page.locator(f'#queries tbody tr[data-query-id="{qid}"]').wait_for(
        state="detached", timeout=20000
    )
    out["cancelled"] = True
    out["charts"] = page.locator("#charts .chart").count()
    browser.close()
out["errors"] = errors
print(json.dumps(out))
