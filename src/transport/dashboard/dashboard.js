// The operator's dashboard: plain browser JavaScript served as it is (no
// build step), calling this service's REST API with the secret key pasted
// into the page. uPlot (its IIFE build, loaded before this file) draws the
// series. Data reaches the DOM through textContent only, never as markup.

/** Where the key lives: this tab's sessionStorage, never localStorage, a cookie or a URL. */
const keyStorageName = "referrals.dashboard.key";

/** The periods offered, as calendar dates in the campaign's time zone. */
const presets = {
  "7d": { interval: "day", days: 7, label: "last 7 days" },
  "30d": { interval: "day", days: 30, label: "last 30 days" },
  "12m": { interval: "month", months: 12, label: "last 12 months" },
};

/** The stream pushes a few updates a second at most; the series and leaderboard follow more slowly. */
const refreshEveryMs = 3000;
/** The review queue can hold thousands of groups: the page lists the most recent. */
const reviewsShown = 100;
const firstReconnectMs = 1000;
const longestReconnectMs = 30_000;

/** Errors that another try would only repeat: the stream stops and says why. */
const finalErrorCodes = new Set([
  "unauthenticated",
  "permission_denied",
  "not_found",
  "invalid_argument",
  "failed_precondition",
]);

const byId = (id) => document.getElementById(id);

const state = {
  key: sessionStorage.getItem(keyStorageName) ?? "",
  campaigns: [],
  /** Aborted when the key, environment, campaign or period changes: ends the calls and the stream. */
  selection: undefined,
  report: undefined,
  previousSeries: undefined,
  chart: undefined,
};

// ---------------------------------------------------------------- API calls

/** A refusal or failure of the API, with the REST error body's code. */
class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function api(path, signal) {
  let response;
  try {
    response = await fetch(path, {
      headers: { authorization: state.key },
      signal,
      cache: "no-store",
    });
  } catch (error) {
    if (signal.aborted) throw error;
    throw new ApiError(0, "network", error.message);
  }
  if (!response.ok) throw await apiErrorOf(response);
  return response.json();
}

async function apiErrorOf(response) {
  let body = {};
  try {
    body = await response.json();
  } catch {
    // A proxy's HTML error page, say: the status alone must do.
  }
  return new ApiError(
    response.status,
    body.code ?? "",
    body.message ?? (response.statusText || "no message"),
  );
}

function describeError(error) {
  if (!(error instanceof ApiError)) return `Something went wrong: ${error.message}`;
  switch (error.status) {
    case 0:
      return `Cannot reach the service (${error.message}). It may be restarting: try again shortly.`;
    case 401:
      return `The key was refused (401 ${error.code}): ${error.message}. Paste the key again.`;
    case 403:
      return `This key may not read the numbers (403 ${error.code}): ${error.message}.`;
    default:
      return `The service answered ${error.status || ""} ${error.code}: ${error.message}`.replace(
        /\s+/g,
        " ",
      );
  }
}

function showError(error) {
  const box = byId("error");
  box.textContent = typeof error === "string" ? error : describeError(error);
  box.hidden = false;
}

function clearError() {
  byId("error").hidden = true;
  byId("error").textContent = "";
}

function showEmpty(message) {
  byId("empty").textContent = message;
  byId("empty").hidden = message === "";
}

function setLive(text, mode = "off") {
  const live = byId("live");
  live.textContent = text;
  live.dataset.mode = mode;
}

// ------------------------------------------------------------------ periods

function todayIn(timeZone) {
  const options = { year: "numeric", month: "2-digit", day: "2-digit" };
  let format;
  try {
    format = new Intl.DateTimeFormat("en-US", { ...options, timeZone });
  } catch {
    format = new Intl.DateTimeFormat("en-US", { ...options, timeZone: "UTC" });
  }
  const parts = format.formatToParts(new Date());
  const part = (type) => Number(parts.find((p) => p.type === type)?.value);
  return { year: part("year"), month: part("month"), day: part("day") };
}

/** A calendar date as ISO text; Date.UTC carries day and month overflow into the next unit. */
function isoDate(year, month, day) {
  return new Date(Date.UTC(year, month - 1, day)).toISOString().slice(0, 10);
}

/**
 * The preset as ISO dates, which the service reads as midnights in the
 * campaign's time zone; `to` is excluded, so it is the day after today (or
 * the first of next month): the current day or month is in the period.
 */
function periodOf(presetName, timeZone) {
  const preset = presets[presetName] ?? presets["30d"];
  const { year, month, day } = todayIn(timeZone);
  if (preset.months) {
    return {
      interval: preset.interval,
      from: isoDate(year, month - preset.months + 1, 1),
      to: isoDate(year, month + 1, 1),
      label: preset.label,
    };
  }
  return {
    interval: preset.interval,
    from: isoDate(year, month, day - preset.days + 1),
    to: isoDate(year, month, day + 1),
    label: preset.label,
  };
}

// --------------------------------------------------------------- formatting

const integer = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });
const percent = new Intl.NumberFormat("en-US", { style: "percent", maximumFractionDigits: 1 });

function count(value) {
  return integer.format(value);
}

/** A ratio as a percentage with its terms, so its base is never in doubt. */
function ratioText(ratio) {
  const shown =
    ratio.value === null || ratio.value === undefined ? "n/a" : percent.format(ratio.value);
  return `${shown} (${count(ratio.numerator)} / ${count(ratio.denominator)})`;
}

function ratioOf(numerator, denominator) {
  return { numerator, denominator, value: denominator === 0 ? null : numerator / denominator };
}

/** An amount in its currency; currency amounts are exact to the minor unit, which this shows. */
function money(amount, currency) {
  if (!currency) return `${amount}`;
  try {
    return new Intl.NumberFormat("en-US", {
      style: "currency",
      currency: currency.toUpperCase(),
    }).format(amount);
  } catch {
    return `${amount} ${currency.toUpperCase()}`;
  }
}

/**
 * Seconds in the unit a person would say, to one decimal: a unit is used
 * from two of it up ("90 minutes", "36 hours"), minutes from one.
 */
function duration(seconds) {
  if (seconds === null || seconds === undefined) return "n/a";
  const [size, name] =
    seconds >= 2 * 86_400
      ? [86_400, "day"]
      : seconds >= 2 * 3600
        ? [3600, "hour"]
        : seconds >= 60
          ? [60, "minute"]
          : [1, "second"];
  const value = Math.round((seconds / size) * 10) / 10;
  return `${value} ${name}${value === 1 ? "" : "s"}`;
}

/** A histogram edge in the largest unit that divides it: "1 hour", not "60 minutes". */
function edgeText(seconds) {
  const units = [
    [86_400, "day"],
    [3600, "hour"],
    [60, "minute"],
    [1, "second"],
  ];
  const [size, name] = units.find(([size]) => seconds % size === 0);
  const value = seconds / size;
  return `${count(value)} ${name}${value === 1 ? "" : "s"}`;
}

function rangeText(bin) {
  if (bin.toSeconds === null) return `${edgeText(bin.fromSeconds)} or more`;
  if (bin.fromSeconds === 0) return `Under ${edgeText(bin.toSeconds)}`;
  return `${edgeText(bin.fromSeconds)} to ${edgeText(bin.toSeconds)}`;
}

/** An instant on the campaign's calendar, to the minute (24-hour clock, as the live label). */
function instantText(iso, timeZone) {
  return new Intl.DateTimeFormat("en-US", {
    year: "numeric",
    month: "short",
    day: "numeric",
    hour: "2-digit",
    minute: "2-digit",
    hourCycle: "h23",
    timeZone,
  }).format(new Date(iso));
}

/** A report's period as the days (or months) it covers: its `to` is excluded, so the last shown is the one before. */
function periodText(report) {
  const options =
    report.interval === "month"
      ? { year: "numeric", month: "long" }
      : { year: "numeric", month: "short", day: "numeric" };
  const format = new Intl.DateTimeFormat("en-US", { ...options, timeZone: report.timeZone });
  const last = new Date(Date.parse(report.to) - 1);
  return `${format.formatRange(new Date(report.from), last)} (${report.timeZone})`;
}

// ------------------------------------------------------------------- the DOM

function element(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined) node.textContent = text;
  if (className) node.className = className;
  return node;
}

function row(cells) {
  const tr = document.createElement("tr");
  for (const cell of cells) {
    const td = element(cell.header ? "th" : "td", cell.text, cell.number ? "number" : undefined);
    if (cell.header) td.scope = "row";
    if (cell.title) td.title = cell.title;
    if (cell.node) td.append(cell.node);
    tr.append(td);
  }
  return tr;
}

function definitions(list, entries) {
  list.replaceChildren(
    ...entries.flatMap(([term, value, id]) => {
      const dd = element("dd", value);
      if (id) dd.id = id;
      return [element("dt", term), dd];
    }),
  );
}

/** A bar whose width is set through the CSSOM, which the page's CSP allows (inline style attributes it does not). */
function bar(share) {
  const track = element("span", undefined, "bar");
  const fill = element("span", undefined, "bar-fill");
  fill.style.width = `${Math.round(Math.min(1, Math.max(0, share)) * 100)}%`;
  track.append(fill);
  track.setAttribute("aria-hidden", "true");
  return track;
}

// Each grant once: a grant approved and then fulfilled is one reward, not two.
function rewardedCount(totals) {
  return totals.rewards.reduce((sum, reward) => sum + Number(reward.committed?.count ?? 0), 0);
}

function renderFunnel(totals) {
  const clicks = totals.clicks ?? 0;
  const identified = totals.customersIdentified;
  const referred = totals.referralsCreated;
  const converted = totals.referralsReached.accepted;
  const rewarded = rewardedCount(totals);
  const steps = [
    {
      id: "clicks",
      name: "Clicked",
      what: "clicks on share links (bots apart)",
      value: clicks,
      secondary: { id: "funnel-visitors", text: `${count(totals.visitors ?? 0)} visitors` },
      ratio: totals.clickToReferral ?? ratioOf(Number(referred), Number(clicks)),
      per: "referred / clicked",
    },
    { id: "identified", name: "Identified", what: "customers identified", value: identified },
    {
      id: "referred",
      name: "Referred",
      what: "referrals created",
      value: referred,
      ratio: ratioOf(referred, identified),
      per: "of identified",
    },
    {
      id: "converted",
      name: "Converted",
      what: "referrals accepted",
      value: converted,
      ratio: totals.conversionRate,
      per: "of referred",
    },
    {
      id: "rewarded",
      name: "Rewarded",
      what: "reward grants committed, each once (approved, or fulfilled without approval)",
      value: rewarded,
      ratio: ratioOf(rewarded, converted),
      per: "of converted",
    },
  ];
  const widest = Math.max(1, ...steps.map((step) => Number(step.value)));
  byId("funnel").replaceChildren(
    ...steps.map((step) => {
      const item = element("li", undefined, "step");
      const value = element("span", count(step.value), "step-value");
      value.id = `funnel-${step.id}`;
      const heading = element("span", undefined, "step-heading");
      heading.append(element("span", step.name, "step-name"), value);
      const ratio = element(
        "span",
        step.ratio ? `${ratioText(step.ratio)} ${step.per}` : "",
        "step-ratio",
      );
      ratio.id = `funnel-${step.id}-ratio`;
      item.append(heading, bar(Number(step.value) / widest));
      if (step.secondary) {
        const secondary = element("span", step.secondary.text, "step-secondary");
        secondary.id = step.secondary.id;
        item.append(secondary);
      }
      item.append(element("small", step.what), ratio);
      return item;
    }),
  );
  const reached = totals.referralsReached;
  definitions(byId("rates"), [
    ["Conversion rate (accepted ÷ created in the period)", ratioText(totals.conversionRate)],
    [
      "Cohort conversion (created in the period, accepted by now)",
      ratioText(totals.cohortConversionRate),
    ],
    ["K-factor (accepted ÷ identified)", ratioText(totals.kFactor)],
    ["Referrers active", count(totals.referrersActive)],
    [
      "Referrals reaching each status",
      `${count(reached.pending)} pending, ${count(reached.flagged)} flagged, ${count(reached.accepted)} accepted, ${count(reached.rejected)} rejected, ${count(reached.reversed)} reversed`,
    ],
    [
      "Checkpoints",
      totals.checkpoints.length === 0
        ? "none"
        : totals.checkpoints.map((c) => `${c.name}: ${count(c.count)}`).join(", "),
    ],
  ]);
}

/** Where the clicks on share links came from, and the bots' fetches, which are not clicks. */
function renderLinks(totals) {
  const channels = totals.channels ?? [];
  const clicks = Number(totals.clicks ?? 0);
  byId("channels").replaceChildren(
    ...channels.map((channel) => {
      const share = ratioOf(Number(channel.clicks), clicks);
      return row([
        { text: channel.channel, header: true },
        { text: count(channel.clicks), number: true },
        {
          text: share.value === null ? "n/a" : percent.format(share.value),
          number: true,
          title: `${count(channel.clicks)} of ${count(clicks)} clicks`,
        },
      ]);
    }),
  );
  byId("channels-empty").hidden = channels.length > 0;
  const bots = totals.botFetches ?? [];
  byId("bot-fetches").replaceChildren(
    ...bots.map((bot) =>
      row([
        { text: bot.reason, header: true },
        { text: count(bot.count), number: true },
      ]),
    ),
  );
  byId("bot-fetches-empty").hidden = bots.length > 0;
}

function renderTimeToConvert(totals) {
  const time = totals.timeToConvert;
  definitions(byId("ttc-summary"), [
    ["Accepted in the period", count(time.count), "ttc-count"],
    ["Median (p50)", duration(time.p50Seconds), "ttc-p50"],
    ["90th percentile (p90)", duration(time.p90Seconds), "ttc-p90"],
  ]);
  const widest = Math.max(1, ...time.histogram.map((bin) => bin.count));
  byId("ttc-histogram").replaceChildren(
    ...time.histogram.map((bin) =>
      row([
        { text: rangeText(bin), header: true },
        { text: count(bin.count), number: true },
        { node: bar(bin.count / widest) },
      ]),
    ),
  );
}

function rewardCell(total, currency) {
  return {
    text: `${money(total.amount, currency)} · ${count(total.count)}`,
    number: true,
    title: `${count(total.count)} grants worth ${money(total.amount, currency)}`,
  };
}

function renderRewards(totals) {
  const statuses = ["pending", "approved", "fulfilled", "rejected", "voided", "expired", "capped"];
  byId("rewards").replaceChildren(
    ...totals.rewards.map((reward) =>
      row([
        {
          text: reward.currency ? reward.currency.toUpperCase() : "Percent discounts",
          header: true,
        },
        ...statuses.map((status) => rewardCell(reward[status], reward.currency)),
      ]),
    ),
  );
  byId("cpa").replaceChildren(
    ...totals.costPerAcquisition.map((cost) =>
      row([
        { text: cost.currency.toUpperCase(), header: true },
        { text: money(cost.committedAmount, cost.currency), number: true },
        { text: count(cost.referralsAccepted), number: true },
        {
          text:
            cost.amount === null
              ? "n/a"
              : `${money(cost.amount, cost.currency)} = ${money(cost.committedAmount, cost.currency)} ÷ ${count(cost.referralsAccepted)}`,
          number: true,
          title: cost.amount === null ? "no referral accepted" : `${cost.amount}`,
        },
      ]),
    ),
  );
  byId("rewards-empty").hidden = totals.rewards.length > 0;
}

function renderFraudCounts(totals) {
  const rules = totals.fraud ?? [];
  byId("fraud-rules").replaceChildren(
    ...rules.map((rule) =>
      row([
        { text: rule.rule, header: true },
        ...["noted", "flagged", "held", "rejected", "shadow"].map((verdict) => ({
          text: count(rule[verdict]),
          number: true,
        })),
      ]),
    ),
  );
  byId("fraud-rules-empty").hidden = rules.length > 0;
}

function renderTotals(totals) {
  renderFunnel(totals);
  renderLinks(totals);
  renderTimeToConvert(totals);
  renderRewards(totals);
  renderFraudCounts(totals);
}

function renderLeaderboard(leaderboard) {
  byId("leaderboard").replaceChildren(
    ...leaderboard.data.map((leader) => {
      const earned = leader.rewards
        .flatMap((balance) =>
          ["approved", "fulfilled", "pending"]
            .filter((status) => balance[status].count > 0)
            .map((status) => `${money(balance[status].amount, balance.currency)} ${status}`),
        )
        .join(", ");
      const who = element("span", leader.name || leader.externalUserId);
      const id = element("small", leader.name ? leader.externalUserId : leader.customerId, "muted");
      const name = element("span", undefined, "referrer");
      name.append(who, id);
      return row([
        { text: `${leader.rank}`, number: true },
        { node: name },
        { text: count(leader.referralsAccepted), number: true },
        { text: count(leader.referralsMade), number: true },
        { text: earned || "none yet" },
      ]);
    }),
  );
  byId("leaderboard-empty").hidden = leaderboard.data.length > 0;
}

const riskLevels = new Set(["low", "medium", "high"]);
const signalNames = { network: "network", device: "device", email_base: "email base" };

function timeNode(iso, timeZone) {
  const time = element("time", instantText(iso, timeZone));
  time.dateTime = iso;
  return time;
}

/** The deadline and what it does; a lapsed one says so in words, not by colour alone. */
function deadlineNode(review, timeZone) {
  if (!review.deadline) return element("span", "none", "muted");
  const lapsed = Date.parse(review.deadline) <= Date.now();
  const accepts = review.onLapse === "accept";
  const box = element("span", undefined, lapsed ? "stack lapsed" : "stack");
  const then = lapsed
    ? accepts
      ? "lapsed: being accepted"
      : "lapsed: stays flagged"
    : accepts
      ? "then accepted"
      : "then stays flagged";
  box.append(timeNode(review.deadline, timeZone), element("small", then));
  return box;
}

function renderFraudReviews(queue, timeZone) {
  const shown = queue.reviews.slice(0, reviewsShown);
  byId("fraud-zone").textContent = ` (times in ${timeZone})`;
  byId("fraud-reviews").replaceChildren(
    ...shown.map((review) =>
      row([
        { text: review.ruleType, header: true },
        { text: review.referrerId },
        { text: count(review.flagged), number: true },
        { text: count(review.held), number: true },
        {
          node: element(
            "span",
            review.risk,
            riskLevels.has(review.risk) ? `risk risk-${review.risk}` : "risk",
          ),
        },
        { node: timeNode(review.lastHitAt, timeZone) },
        { node: deadlineNode(review, timeZone) },
        { text: review.message },
      ]),
    ),
  );
  byId("fraud-reviews-empty").hidden = queue.reviews.length > 0;
  const more = byId("fraud-reviews-more");
  more.hidden = queue.reviews.length <= shown.length;
  more.textContent = more.hidden
    ? ""
    : `Showing the ${count(shown.length)} most recent of ${count(queue.reviews.length)} open reviews; GET /fraud-reviews lists them all.`;
  byId("fraud-reviews-truncated").hidden = !queue.truncated;
  byId("fraud-signals").replaceChildren(
    ...queue.sharedSignals.map((shared) =>
      row([
        { text: shared.referrerId, header: true },
        { text: signalNames[shared.signal] ?? shared.signal },
        { text: count(shared.referees), number: true },
      ]),
    ),
  );
  byId("fraud-signals-box").hidden = queue.sharedSignals.length === 0;
}

// ------------------------------------------------------------------ the chart

const palette = {
  created: "#4f46e5",
  accepted: "#059669",
  createdBefore: "#a5b4fc",
  acceptedBefore: "#6ee7b7",
};

function seriesData() {
  const series = state.report.series;
  const previous = state.previousSeries ?? [];
  // The previous period is laid over this one point for point.
  const before = (pick) =>
    series.map((_, index) => (previous[index] ? pick(previous[index].stats) : null));
  return [
    series.map((point) => Date.parse(point.from) / 1000),
    series.map((point) => point.stats.referralsCreated),
    series.map((point) => point.stats.referralsReached.accepted),
    before((stats) => stats.referralsCreated),
    before((stats) => stats.referralsReached.accepted),
  ];
}

function renderSeries() {
  const report = state.report;
  const box = byId("series-chart");
  const data = seriesData();
  const quiet = data[1].every((n) => n === 0) && data[2].every((n) => n === 0);
  byId("series-empty").hidden = !quiet;
  if (state.chart) {
    state.chart.setData(data);
    return;
  }
  const timeZone = report.timeZone;
  const monthly = report.interval === "month";
  const pointLabel = monthly ? "{MMM} {YYYY}" : "{MMM} {D}, {YYYY}";
  const tickFormat = new Intl.DateTimeFormat("en-US", {
    timeZone,
    month: "short",
    ...(monthly ? { year: "numeric" } : { day: "numeric" }),
  });
  const tickSpacing = monthly ? 90 : 70;
  const line = (label, stroke, dash) => ({
    label,
    stroke,
    width: 2,
    ...(dash ? { dash: [6, 4] } : {}),
    points: { show: data[0].length <= 31 },
    value: (_chart, value) => (value === null ? "–" : count(value)),
  });
  state.chart = new uPlot(
    {
      width: Math.max(320, box.clientWidth),
      height: 260,
      // Room on the right for the last tick's label, which is centred on the edge.
      padding: [null, 32, null, null],
      tzDate: (seconds) => uPlot.tzDate(new Date(seconds * 1000), timeZone),
      scales: { x: { time: true }, y: { range: (_chart, _min, max) => [0, Math.max(4, max)] } },
      axes: [
        {
          stroke: "#475569",
          grid: { stroke: "#e2e8f0" },
          // Ticks on the points themselves (uPlot's own would fall on hours
          // or mid-month), every n-th when they would crowd.
          splits: (chart) => {
            const starts = chart.data[0];
            const fit = Math.max(1, Math.floor(chart.width / tickSpacing));
            const every = Math.ceil(starts.length / fit);
            return starts.filter((_, index) => index % every === 0);
          },
          values: (_chart, ticks) => ticks.map((tick) => tickFormat.format(new Date(tick * 1000))),
        },
        {
          stroke: "#475569",
          grid: { stroke: "#e2e8f0" },
          // Whole referrals only: no 0.5 ticks on a quiet period.
          incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 100_000],
          values: (_chart, ticks) => ticks.map((tick) => count(tick)),
        },
      ],
      series: [
        { label: monthly ? "Month" : "Day", value: pointLabel },
        line("Created", palette.created),
        line("Accepted", palette.accepted),
        line("Created, period before", palette.createdBefore, true),
        line("Accepted, period before", palette.acceptedBefore, true),
      ],
    },
    data,
    box,
  );
}

function resizeChart() {
  const box = byId("series-chart");
  if (state.chart && box.clientWidth > 0) {
    state.chart.setSize({ width: Math.max(320, box.clientWidth), height: 260 });
  }
}

function dropChart() {
  state.chart?.destroy();
  state.chart = undefined;
  delete byId("series-chart").dataset.previous;
}

// ------------------------------------------------------------- the live feed

function sleep(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener(
      "abort",
      () => {
        clearTimeout(timer);
        resolve();
      },
      { once: true },
    );
  });
}

/** One Server-Sent Event block: `event:` and `data:` fields; comment lines start with `:`. */
function parseEvent(block) {
  let type = "message";
  const data = [];
  for (const rawLine of block.split("\n")) {
    const line = rawLine.endsWith("\r") ? rawLine.slice(0, -1) : rawLine;
    if (line === "" || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "event") type = value;
    else if (field === "data") data.push(value);
  }
  return data.length === 0 ? undefined : { type, data: data.join("\n") };
}

/** The events of a response body as they arrive (EventSource cannot send the Authorization header). */
async function* serverSentEvents(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      const blocks = buffer.split("\n\n");
      buffer = blocks.pop() ?? "";
      for (const block of blocks) {
        const event = parseEvent(block);
        if (event) yield event;
      }
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

/**
 * Follows `GET …/stats/stream` for the period on screen: every event's
 * totals redraw the funnel, and ask for the series, leaderboard and review queue again
 * (throttled). A stream that ends or fails is opened again after a growing
 * pause; one refused for a reason a retry would repeat stops.
 */
async function watch(path, period, environment, signal, onTotals) {
  const query = new URLSearchParams({ environment, from: period.from, to: period.to });
  let pause = firstReconnectMs;
  while (!signal.aborted) {
    try {
      const response = await fetch(`${path}/stats/stream?${query}`, {
        headers: { authorization: state.key, accept: "text/event-stream" },
        signal,
        cache: "no-store",
      });
      if (!response.ok) throw await apiErrorOf(response);
      setLive("Live", "on");
      for await (const event of serverSentEvents(response.body)) {
        if (signal.aborted) return;
        const message = JSON.parse(event.data);
        if (event.type === "error")
          throw new ApiError(0, message.code ?? "", message.message ?? "");
        pause = firstReconnectMs;
        onTotals(message.totals);
        setLive(`Live · updated ${new Date().toLocaleTimeString("en-GB")}`, "on");
      }
    } catch (error) {
      if (signal.aborted) return;
      if (
        error instanceof ApiError &&
        (finalErrorCodes.has(error.code) || [401, 403].includes(error.status))
      ) {
        showError(`Live updates stopped. ${describeError(error)}`);
        setLive("Live updates stopped", "off");
        return;
      }
    }
    if (signal.aborted) return;
    const wait = Math.round(pause * (0.8 + Math.random() * 0.4));
    setLive(`Reconnecting in ${Math.ceil(wait / 1000)} s…`, "retry");
    await sleep(wait, signal);
    pause = Math.min(pause * 2, longestReconnectMs);
  }
}

// ----------------------------------------------------------------- loading

function newSelection() {
  state.selection?.abort();
  state.selection = new AbortController();
  return state.selection.signal;
}

function hideReport() {
  byId("report").hidden = true;
  dropChart();
}

function selectedCampaign() {
  return state.campaigns.find((campaign) => campaign.id === byId("campaign").value);
}

async function loadCampaigns() {
  const signal = newSelection();
  clearError();
  const environment = byId("environment").value;
  const select = byId("campaign");
  setLive("Loading…", "retry");
  let campaigns;
  try {
    campaigns = await api(`/campaigns?${new URLSearchParams({ environment })}`, signal);
  } catch (error) {
    failedToLoad(error, signal);
    return;
  }
  const previous = select.value;
  state.campaigns = campaigns;
  select.replaceChildren(
    ...campaigns.map((campaign) => {
      const option = element("option", campaign.name);
      option.value = campaign.id;
      return option;
    }),
  );
  select.disabled = campaigns.length === 0;
  if (campaigns.length === 0) {
    select.append(element("option", "No campaigns"));
    showEmpty(`There are no campaigns in ${environment} yet.`);
    setLive("Not connected");
    hideReport();
    return;
  }
  showEmpty("");
  const kept =
    campaigns.find((campaign) => campaign.id === previous) ??
    campaigns.find((campaign) => campaign.isDefault) ??
    campaigns[0];
  select.value = kept.id;
  await loadReport();
}

/** A load that failed: said on the page, unless a newer selection cancelled it. */
function failedToLoad(error, signal) {
  if (signal.aborted) return;
  showError(error);
  setLive("Not connected");
  hideReport();
}

async function loadReport() {
  const campaign = selectedCampaign();
  if (!campaign) return;
  const signal = newSelection();
  clearError();
  const environment = byId("environment").value;
  const period = periodOf(byId("period").value, campaign.timeZone || "UTC");
  const path = `/campaigns/${encodeURIComponent(campaign.id)}`;
  const statsQuery = (from, to, compare) =>
    new URLSearchParams({
      environment,
      interval: period.interval,
      from,
      to,
      ...(compare ? { compare: "previous_period" } : {}),
    });
  const leaderboardPath = `${path}/leaderboard?${new URLSearchParams({ environment, limit: "10" })}`;
  const reviewsPath = `/fraud-reviews?${new URLSearchParams({ campaignId: campaign.id, environment })}`;
  setLive("Loading…", "retry");
  let stats;
  let leaderboard;
  let reviews;
  try {
    [stats, leaderboard, reviews] = await Promise.all([
      api(`${path}/stats?${statsQuery(period.from, period.to, true)}`, signal),
      api(leaderboardPath, signal),
      api(reviewsPath, signal),
    ]);
  } catch (error) {
    failedToLoad(error, signal);
    return;
  }
  const report = stats.report;
  dropChart();
  state.report = report;
  state.previousSeries = undefined;
  byId("report").hidden = false;
  byId("series-interval").textContent = report.interval;
  byId("period-label").textContent =
    `${campaign.name}, ${environment}: ${period.label}, ${periodText(report)}`;
  renderTotals(report.totals);
  renderSeries();
  renderLeaderboard(leaderboard);
  renderFraudReviews(reviews, report.timeZone);

  // Series, leaderboard and review queue follow the live totals, at most every refreshEveryMs.
  let refreshTimer;
  let lastRefresh = Date.now();
  signal.addEventListener("abort", () => clearTimeout(refreshTimer), { once: true });
  const refresh = async () => {
    refreshTimer = undefined;
    lastRefresh = Date.now();
    try {
      const [latest, board, queue] = await Promise.all([
        api(`${path}/stats?${statsQuery(period.from, period.to, false)}`, signal),
        api(leaderboardPath, signal),
        api(reviewsPath, signal),
      ]);
      if (signal.aborted) return;
      state.report = { ...state.report, series: latest.report.series };
      renderSeries();
      renderLeaderboard(board);
      renderFraudReviews(queue, report.timeZone);
    } catch {
      // The next event asks again; the stream reports a lasting failure.
    }
  };
  let shown = JSON.stringify(report.totals);
  const onTotals = (totals) => {
    const text = JSON.stringify(totals);
    if (text === shown) return;
    shown = text;
    renderTotals(totals);
    if (refreshTimer === undefined) {
      refreshTimer = setTimeout(refresh, Math.max(0, lastRefresh + refreshEveryMs - Date.now()));
    }
  };
  void watch(path, period, environment, signal, onTotals);

  if (!report.previous) return;
  try {
    const before = await api(
      `${path}/stats?${statsQuery(report.previous.from, report.previous.to, false)}`,
      signal,
    );
    if (signal.aborted) return;
    state.previousSeries = before.report.series;
    renderSeries();
    // For whoever waits for the page to be whole (the screenshot script).
    byId("series-chart").dataset.previous = "shown";
  } catch (error) {
    if (!signal.aborted)
      showError(`The period before could not be loaded. ${describeError(error)}`);
  }
}

// ------------------------------------------------------------------ wiring

function useKey(key) {
  const trimmed = key.trim();
  if (trimmed === "") {
    showError("Paste a secret API key (sk_…) first.");
    return;
  }
  if (trimmed.startsWith("pk_")) {
    showError("That is a public key: the numbers need a secret key (sk_…).");
    return;
  }
  state.key = trimmed;
  sessionStorage.setItem(keyStorageName, trimmed);
  void loadCampaigns();
}

function forgetKey() {
  newSelection();
  state.key = "";
  state.campaigns = [];
  sessionStorage.removeItem(keyStorageName);
  byId("key").value = "";
  const select = byId("campaign");
  select.replaceChildren(element("option", "Enter a key first"));
  select.disabled = true;
  clearError();
  hideReport();
  showEmpty("Paste a secret API key (sk_…) to see how the program performs.");
  setLive("Not connected");
}

byId("controls").addEventListener("submit", (event) => {
  event.preventDefault();
  useKey(byId("key").value);
});
byId("forget").addEventListener("click", forgetKey);
byId("environment").addEventListener("change", () => {
  if (state.key) void loadCampaigns();
});
byId("campaign").addEventListener("change", () => void loadReport());
byId("period").addEventListener("change", () => void loadReport());
new ResizeObserver(resizeChart).observe(byId("series-chart"));

if (state.key) {
  byId("key").value = state.key;
  void loadCampaigns();
} else {
  showEmpty("Paste a secret API key (sk_…) to see how the program performs.");
}
