// SPDX-License-Identifier: Apache-2.0
#include "saturate/report/html_report.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "saturate/core/error.h"
#include "saturate/core/json.h"
#include "saturate/core/units.h"
#include "saturate/diagnose/diagnose.h"
#include "saturate/report/train_report.h"
#include "saturate/telemetry/noise_scale.h"
#include "saturate/telemetry/step_record.h"

namespace saturate {
namespace {

using detail::concat;
using json = nlohmann::json;

std::string read_text(const std::string& path, const std::string& package) {
  std::ifstream in(path, std::ios::binary);
  SATURATE_CHECK(in.good(), "report: cannot read ", path, " (Debian package ", package,
                 "; scripts/install-deps installs it)");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Text placed inside <script> or <style>: only "</script" or "</style" (any case) would end the
// element early; "<\/" is the same text in a JS string, regex or JSON string. Other "</" stay
// as they are (c3's own code has /</g, which "<\/" would break).
std::string script_safe(const std::string& text) {
  auto closes_at = [&](size_t i) {
    for (const char* tag : {"script", "style"}) {
      size_t k = 0;
      while (tag[k] && i + 2 + k < text.size() &&
             std::tolower(static_cast<unsigned char>(text[i + 2 + k])) == tag[k])
        ++k;
      if (!tag[k]) return true;
    }
    return false;
  };
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '<' && i + 1 < text.size() && text[i + 1] == '/' && closes_at(i)) {
      out += "<\\/";
      ++i;
    } else {
      out += text[i];
    }
  }
  return out;
}

std::string html_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// A plan as the report draws it.
json plan_input(const json& plan, const std::string& path) {
  const std::string where = "report: " + path;
  SATURATE_CHECK(plan["trials"].is_array() && plan["stages"].is_array(), where,
                 ": trials and stages must be arrays");
  json in;
  in["kind"] = "plan";
  in["title"] = concat("saturate tune: ", plan.value("model", std::string("?")), " on ",
                       plan.value("data", std::string("?")), ", ",
                       plan.value("device", std::string("?")));
  in["stages"] = plan["stages"];
  in["trials"] = json::array();
  for (const json& t : plan["trials"]) {
    SATURATE_CHECK(t.is_object() && t.contains("config") && t["config"].is_object(), where,
                   ": every trial needs a config object");
    const json& c = t["config"];
    in["trials"].push_back({{"batch_size", c.value("batch_size", 0)},
                            {"accumulate", c.value("accumulate", 1)},
                            {"precision", c.value("precision", std::string("fp32"))},
                            {"memory_format", c.value("memory_format", std::string("contiguous"))},
                            {"threads", c.value("threads", 0)},
                            {"stage", t.value("stage", std::string())},
                            {"purpose", t.value("purpose", std::string())},
                            {"fits", t.value("outcome", std::string("fits")) == "fits"},
                            {"samples_per_s", t.value("samples_per_s", 0.0)},
                            {"peak_memory_bytes", t.value("peak_memory_bytes", 0)}});
  }
  in["chosen"] = plan["config"];
  // The user's configuration, as the baseline stage measured it.
  for (const json& t : plan["trials"])
    if (t.value("stage", std::string()) == "baseline" && t["config"].is_object()) {
      in["baseline_config"] = t["config"];
      break;
    }
  in["interrupted"] = plan.value("interrupted", false);
  in["baseline"] = plan["baseline"];
  in["tuned"] = plan["tuned"];
  in["quality"] = plan.value("quality", json::object());
  in["memory_limit_bytes"] = plan.value("memory_limit_bytes", 0);
  in["findings"] = plan.value("findings", json::array());
  in["context"] = plan.value("context", json::object());
  if (plan.contains("exec") && plan["exec"].is_object()) in["exec"] = plan["exec"];
  if (plan.contains("goodput") && plan["goodput"].is_object()) in["goodput"] = plan["goodput"];
  return in;
}

// steps.jsonl's evaluation, target and divergence lines; false for any other line.
bool read_eval_or_target(const json& j, const std::string& path, int64_t n, json& in,
                         json& evals) {
  if (j.value("type", std::string()) == "divergence") {  // the run stopped as diverged
    SATURATE_CHECK(j.contains("step") && j["step"].is_number() && j.contains("reason") &&
                       j["reason"].is_string(),
                   "report: ", path, ": line ", n, ": a divergence record needs a 'step' and a 'reason'");
    in["divergence"] = j;
    return true;
  }
  if (j.value("type", std::string()) == "target") {  // --target: reached or not, and when
    SATURATE_CHECK(j.contains("metric") && j["metric"].is_string() && j.contains("reached") &&
                       j["reached"].is_boolean(),
                   "report: ", path, ": line ", n,
                   ": a target record needs a 'metric' name and 'reached' true or false");
    in["target"] = j;
    return true;
  }
  if (j.value("type", std::string()) == "eval") {
    // Validation (or test) metrics every --eval-every steps and at the end.
    for (const char* key : {"step", "value"})
      SATURATE_CHECK(j.contains(key) && j[key].is_number(), "report: ", path, ": line ", n,
                     ": an evaluation record needs a number '", key, "'");
    SATURATE_CHECK(j.contains("metric") && j["metric"].is_string(), "report: ", path,
                   ": line ", n, ": an evaluation record needs a 'metric' name");
    evals.push_back({{"step", j["step"]}, {"metric", j["metric"]}, {"value", j["value"]}});
    return true;
  }
  return false;
}

// A run's steps.jsonl: per-step phases, loss and samples/s over the run.
json run_input(std::istream& lines, const std::string& path) {
  json in;
  in["kind"] = "run";
  in["title"] = "saturate run: " + path;
  json steps = json::array();
  json evals = json::array();
  json context = json::object();
  std::string line;
  int64_t n = 0;
  while (std::getline(lines, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json j;
    try {
      j = json::parse(line);
    } catch (const json::exception& e) {
      throw Error(concat("report: ", path, ": line ", n, ": not JSON (", e.what(), ")"));
    }
    SATURATE_CHECK(j.is_object(), "report: ", path, ": line ", n, ": expected an object");
    if (j.value("type", std::string()) == "context") {  // train's first line: machine and run
      context = j;
      context.erase("type");
      continue;
    }
    if (read_eval_or_target(j, path, n, in, evals)) continue;
    if (j.value("type", std::string()) != "step") continue;
    for (const char* key : {"step", "step_ms"})
      SATURATE_CHECK(j.contains(key) && j[key].is_number(), "report: ", path, ": line ", n,
                     ": a step record needs a number '", key, "'");
    // A diverged step's loss is written as null (JSON has no NaN).
    SATURATE_CHECK(j.contains("loss") && (j["loss"].is_number() || j["loss"].is_null()),
                   "report: ", path, ": line ", n, ": a step record needs a number 'loss' (or null)");
    steps.push_back(j);
  }
  SATURATE_CHECK(!steps.empty(), "report: ", path, ": no step records (a steps.jsonl of --logdir)");
  in["steps"] = steps;
  in["evals"] = evals;
  // The rules that need only the steps (the file has no device or configuration facts).
  RunFacts facts;
  NoiseScale noise;
  for (const json& j : steps) {
    StepRecord r;
    r.step = j.value("step", int64_t{0});
    r.samples = j.value("samples", int64_t{0});
    r.step_ms = j.value("step_ms", 0.0);
    r.data_wait_ms = j.value("data_wait_ms", 0.0);
    r.host_to_device_ms = j.value("host_to_device_ms", 0.0);
    r.forward_ms = j.value("forward_ms", 0.0);
    r.backward_ms = j.value("backward_ms", 0.0);
    r.optimizer_ms = j.value("optimizer_ms", 0.0);
    r.communication_ms = j.value("communication_ms", 0.0);
    r.other_ms = j.value("other_ms", 0.0);
    r.loss = j["loss"].is_number() ? j["loss"].get<double>() : std::nan("");
    facts.steps.push_back(r);
    // The noise scale's per-step estimates, where the run measured them.
    const auto sqr = j.find("gns_grad_sqr"), trace = j.find("gns_trace");
    if (sqr != j.end() && trace != j.end() && sqr->is_number() && trace->is_number())
      noise.add({sqr->get<double>(), trace->get<double>()}, j.value("gns_b_small", 0.0),
                j.value("gns_b_big", 0.0));
  }
  if (!facts.steps.empty()) facts.batch_size = facts.steps.front().samples;
  facts.noise = noise.estimate();
  if (facts.noise.steps > 0) {
    in["gns"] = noise_scale_to_json(facts.noise);
    in["gns_text"] = describe_noise_scale(facts.noise);
  }
  facts.warmup_steps = std::min<int64_t>(5, static_cast<int64_t>(facts.steps.size()) / 5);
  in["findings"] = findings_to_json(diagnose(facts));
  in["context"] = context;
  return in;
}

// Draws everything from the embedded data; each chart marks its container when it rendered,
// and any error lands in #errors (and the console), which the headless-browser test reads.
constexpr const char* kScript = R"JS(
(function () {
  var data = JSON.parse(document.getElementById('report-data').textContent);
  var errors = document.getElementById('errors');
  function fail(where, e) {
    errors.textContent += where + ': ' + e + '\n';
    console.error('saturate report: ' + where + ': ' + e);
  }
  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined) e.textContent = text;
    if (cls) e.className = cls;
    return e;
  }
  function fmt(v, d) { return (typeof v === 'number') ? v.toFixed(d === undefined ? 1 : d) : String(v); }
  function mib(b) { return (b / 1048576).toFixed(1); }
  function chart(id, spec) {
    try {
      spec.bindto = '#' + id;
      spec.onrendered = function () { document.getElementById(id).setAttribute('data-rendered', '1'); };
      c3.generate(spec);
    } catch (e) { fail(id, e); }
  }
  document.getElementById('title').textContent = data.title;

  // Findings.
  var fl = document.getElementById('findings');
  if (!data.findings.length) fl.appendChild(el('p', 'No rule fired.'));
  data.findings.forEach(function (f) {
    var d = el('div', undefined, 'finding ' + f.severity);
    d.appendChild(el('b', '[' + f.severity + '] ' + f.title));
    d.appendChild(el('div', '→ ' + f.recommendation));
    d.appendChild(el('div', f.evidence.map(function (e) { return e.name + ' = ' + fmt(e.value, 2) + (e.unit ? ' ' + e.unit : ''); }).join(', '), 'evidence'));
    fl.appendChild(d);
  });

  // Context.
  var ctx = document.getElementById('context');
  Object.keys(data.context).forEach(function (k) {
    var tr = el('tr'); tr.appendChild(el('td', k)); tr.appendChild(el('td', String(data.context[k]))); ctx.appendChild(tr);
  });

  // A plan for the user's own program (tune --exec): what to run, and how it did by itself.
  var ex = document.getElementById('exec');
  if (data.exec) {
    ex.appendChild(el('p', 'Your program, as given: ' + fmt(data.exec.defaults_samples_per_s) +
                   ' samples/s; it applies ' + (data.exec.applied || []).join(', ') + '; ' +
                   data.exec.runs + ' runs of it. Run it tuned with saturate train --config, or:'));
    ex.appendChild(el('pre', data.exec.reproduce));
  } else {
    ex.style.display = 'none';
  }

  // The gradient noise scale: the plan's goodput choice, or a run's measured value.
  var gp = document.getElementById('goodput'), gt = document.getElementById('goodput-text');
  if (data.goodput) {
    var g = data.goodput, n = g.noise_scale;
    var why = g.why ? g.why.charAt(0).toUpperCase() + g.why.slice(1) : '';
    gt.appendChild(el('p', 'Gradient noise scale ' + (n.phi === null ? 'not resolved' : fmt(n.phi, 0) +
                   ' (95%: ' + fmt(n.low, 0) + '–' + (n.high === null ? '∞' : fmt(n.high, 0)) + ')') +
                   ', ' + n.kind + ', ' + n.steps + ' steps of ' + n.b_small + ' vs ' + n.b_big +
                   ' samples. ' + why));
    // What the quality guard trained along the curve: predicted against measured efficiency.
    (g.guard_branches || []).forEach(function (b) {
      var measured = b.diverged ? 'diverged' : b.measured_efficiency === null ? 'not measured' :
          fmt(b.measured_efficiency, 2);
      var then = b.phi_after === null ? '' : '; φ then credited ' + fmt(b.phi_after, 0);
      gt.appendChild(el('p', 'Guard: batch ' + b.batch_size + (b.searched_up ? ' (up the curve)' : '') +
          ', ' + b.samples + ' samples at equal time: ' + (b.accepted ? 'accepted' : b.slower ? 'passed on quality, but measured slower to it than your batch' : 'rejected') +
          '; efficiency predicted ' + fmt(b.predicted_efficiency, 2) + ', measured ' + measured + then + '.'));
    });
    if (g.curve && g.curve.length > 1) {
      chart('chart-goodput', {
        data: { x: 'batch', columns: [['batch'].concat(g.curve.map(function (p) { return p.batch_size; })),
          ['samples/s vs yours'].concat(g.curve.map(function (p) { return p.samples_per_s / g.curve[0].samples_per_s; })),
          ['predicted speed-up to target'].concat(g.curve.map(function (p) { return p.predicted_speedup; }))] },
        axis: { x: { label: 'batch size', type: 'category' }, y: { label: '× your batch' } }
      });
    } else {
      document.getElementById('chart-goodput').setAttribute('data-rendered', 'none');
      document.getElementById('chart-goodput').style.display = 'none';
    }
  } else if (data.gns_text) {
    gt.appendChild(el('p', 'Gradient noise scale measured in the steps: ' + data.gns_text + '.'));
    document.getElementById('chart-goodput').setAttribute('data-rendered', 'none');
    document.getElementById('chart-goodput').style.display = 'none';
  } else {
    gp.style.display = 'none';
  }

  // Axes that start at zero, a bounded number of ticks on numeric x axes.
  var y0 = function (label) { return { label: { text: label, position: 'outer-middle' }, min: 0, padding: { bottom: 0 } }; };
  var short = function (v) {  // 12000 -> 12k, 1500000 -> 1.5M
    var a = Math.abs(v), u = a >= 1e6 ? [1e6, 'M'] : a >= 1e3 ? [1e3, 'k'] : [1, ''];
    var x = v / u[0];
    return (u[0] === 1 || Math.abs(x - Math.round(x)) < 0.05 ? Math.round(x) : x.toFixed(1)) + u[1];
  };
  var xn = function (label) { return { label: { text: label, position: 'outer-center' }, tick: { count: 7, fit: false, format: short } }; };
  // A batch-size axis on a log scale (x is log2 of the batch: a search spans 1 to tens of
  // thousands, and on a linear axis every batch near the user's lands on one pixel). Ticks at
  // powers of two, every k-th doubling so that at most 9 show.
  var lb = function (b) { return Math.log(b) / Math.LN2; };
  var xb = function (batches) {
    var u = batches.filter(function (b) { return b > 0; });
    var lo = Math.floor(lb(Math.min.apply(null, u.length ? u : [1])));
    var hi = Math.ceil(lb(Math.max.apply(null, u.length ? u : [2])));
    var k = Math.max(1, Math.ceil((hi - lo + 1) / 9)), ticks = [];
    for (var x = lo; x <= hi; x += k) ticks.push(x);
    return { label: { text: 'batch size (log scale)', position: 'outer-center' },
             tick: { values: ticks, fit: false, format: function (v) { return short(Math.round(Math.pow(2, v))); } } };
  };
  function smooth(v, w) {  // trailing mean over w values; null (a non-finite loss) stays a gap
    var out = [];
    for (var i = 0; i < v.length; i++) {
      var sum = 0, n = 0;
      for (var k = Math.max(0, i - w + 1); k <= i; k++) if (v[k] !== null && isFinite(v[k])) { sum += v[k]; n++; }
      out.push(v[i] === null || !n ? null : sum / n);
    }
    return out;
  }
  function headline(lines) {
    var h = document.getElementById('headline');
    lines.forEach(function (l, i) { h.appendChild(el(i ? 'p' : 'p', l, i ? 'sub' : 'lead')); });
  }
  function describe(c) {
    return 'batch ' + c.batch_size + (c.accumulate > 1 ? ' (' + c.accumulate + ' micro-batches)' : '') + ', ' +
        c.precision + (c.memory_format === 'channels-last' ? ', channels-last' : '') +
        (c.threads ? ', ' + c.threads + (c.threads === 1 ? ' thread' : ' threads') : '') +
        (c.workers ? ', ' + c.workers + (c.workers === 1 ? ' worker' : ' workers') : '') + (c.world_size > 1 ? ', ' + c.world_size + ' ranks' : '') +
        (c.lr ? ', lr ' + fmt(c.lr, 6) : '');
  }

  if (data.kind === 'plan') {
    document.getElementById('run-only').style.display = 'none';
    var q = data.quality || {}, b0 = data.baseline.samples_per_s, b1 = data.tuned.samples_per_s;
    var share = q.metric === undefined || /accuracy/.test(q.metric);
    var metric = function (v) { return share ? fmt(100 * v, 2) + '%' : fmt(v, 4); };
    headline([
      (data.interrupted ? 'Partial plan (tune interrupted): ' : 'Plan: ') + describe(data.chosen),
      fmt(b0) + ' → ' + (b1 > 0 ? fmt(b1) + ' samples/s (' + fmt(b1 / b0, 2) + '×)' : 'not measured at this configuration'),
      'Quality ' + (q.status || 'not checked') + (q.baseline !== undefined && q.tuned !== undefined && q.status !== 'not_run' ?
          ': ' + (q.metric || 'validation accuracy') + ' ' + metric(q.tuned) + ' vs ' + metric(q.baseline) + ' with your settings' : '') +
          (data.goodput && data.goodput.chosen_batch !== data.goodput.user_batch ?
           '; batch chosen for time to quality (predicted ' + fmt(data.goodput.predicted_speedup, 2) + '× sooner)' : '')]);
    var st = document.getElementById('stages');
    data.stages.forEach(function (s) {
      var tr = el('tr');
      [s.name, s.before_samples_per_s > 0 ? fmt(s.before_samples_per_s) : '–',
       s.after_samples_per_s > 0 ? fmt(s.after_samples_per_s) : '–', s.changed ? 'changed' : '', s.why].forEach(function (c) { tr.appendChild(el('td', c)); });
      st.appendChild(tr);
    });
    // Each stage's figure, then the plan's own (what train --config runs).
    var names = data.stages.map(function (s) { return s.name; }).concat(['plan']);
    var rates = data.stages.map(function (s) { return s.after_samples_per_s; }).concat([b1]);
    chart('chart-stages', {
      data: { x: 'stage', columns: [['stage'].concat(names), ['samples/s'].concat(rates)], type: 'bar',
              color: function (c, d) { return d && d.index === names.length - 1 ? '#2ca02c' : '#1f77b4'; } },
      axis: { x: { type: 'category' }, y: y0('samples/s') }, legend: { show: false }
    });
    // Throughput and memory against batch size, one series per precision, layout and threads.
    var chosen = data.chosen.batch_size, limit = data.memory_limit_bytes || 0;
    var key = function (t) { return t.precision + (t.memory_format === 'channels-last' ? ', channels-last' : '') +
        (t.threads ? ', ' + t.threads + (t.threads === 1 ? ' thread' : ' threads') : ''); };
    var series = {};
    data.trials.forEach(function (t) { series[key(t)] = true; });
    var xs = {}, cols = [], memxs = {}, memcols = [];
    Object.keys(series).forEach(function (k, i) {
      var fit = data.trials.filter(function (t) { return key(t) === k && t.fits && t.samples_per_s > 0; });
      fit.sort(function (a, b) { return a.batch_size - b.batch_size; });
      if (fit.length) {
        xs[k] = 'x' + i; cols.push(['x' + i].concat(fit.map(function (t) { return lb(t.batch_size); })));
        cols.push([k].concat(fit.map(function (t) { return t.samples_per_s; })));
      }
      var mem = data.trials.filter(function (t) { return key(t) === k && t.fits && t.peak_memory_bytes > 0; });
      mem.sort(function (a, b) { return a.batch_size - b.batch_size; });
      if (mem.length) {
        memxs[k] = 'm' + i; memcols.push(['m' + i].concat(mem.map(function (t) { return lb(t.batch_size); })));
        memcols.push([k].concat(mem.map(function (t) { return +mib(t.peak_memory_bytes); })));
      }
    });
    var ooms = data.trials.filter(function (t) { return !t.fits; });
    if (ooms.length) {
      memxs['out of memory'] = 'oom_x';
      memcols.push(['oom_x'].concat(ooms.map(function (t) { return lb(t.batch_size); })));
      memcols.push(['out of memory'].concat(ooms.map(function () { return limit ? +mib(limit) : 0; })));
    }
    var chosenLine = { x: { lines: [{ value: lb(chosen), text: 'plan: ' + chosen, position: 'start' }] } };
    var measured = data.trials.filter(function (t) { return t.fits; }).map(function (t) { return t.batch_size; });
    chart('chart-throughput', {
      data: { xs: xs, columns: cols, type: 'scatter' },
      axis: { x: xb(measured), y: y0('samples/s') }, grid: chosenLine
    });
    var memspec = {
      data: { xs: memxs, columns: memcols, type: 'scatter', colors: { 'out of memory': '#d62728' } },
      axis: { x: xb(data.trials.map(function (t) { return t.batch_size; })), y: y0('peak memory (MiB)') },
      grid: { x: chosenLine.x, y: { lines: [] } }
    };
    if (limit) memspec.grid.y.lines.push({ value: +mib(limit), text: 'limit ' + mib(limit) + ' MiB', position: 'start' });
    chart('chart-memory', memspec);
    // Time per sample: the two runs have different batches, so ms per step would not compare.
    var phases = ['data_wait', 'host_to_device', 'forward', 'backward', 'optimizer', 'other'];
    var bc = data.baseline_config || data.chosen;
    var per = function (m, c) { return function (p) { return 1000 * ((m.phases_ms || {})[p] || 0) / Math.max(1, c.batch_size * (c.world_size || 1)); }; };
    chart('chart-breakdown', {
      data: { x: 'run', columns: [['run', 'yours (batch ' + bc.batch_size + ')', 'plan (batch ' + chosen + ')']].concat(phases.map(function (p) {
        return [p, per(data.baseline, bc)(p), per(data.tuned, data.chosen)(p)]; })),
        type: 'bar', groups: [phases] },
      axis: { x: { type: 'category' }, y: y0('µs per sample') }
    });
    // The guard's training losses against samples seen, smoothed; its validation at the end.
    var curves = [], lxs = {};
    function curve(name, losses, batch) {
      if (!losses || !losses.length) return;
      var w = Math.max(1, Math.round(losses.length / 25));
      lxs[name] = name + '_x';
      curves.push([name + '_x'].concat(losses.map(function (_, i) { return (i + 1) * batch; })));
      curves.push([name].concat(smooth(losses, w)));
    }
    curve('yours (batch ' + bc.batch_size + ')', q.baseline_losses, bc.batch_size);
    curve('plan (batch ' + chosen + ')', q.tuned_losses, chosen);
    if (curves.length) {
      var vals = [], vxs = {}, axes = {};
      [['yours: validation', q.baseline_losses, bc.batch_size, q.baseline], ['plan: validation', q.tuned_losses, chosen, q.tuned]].forEach(function (v) {
        if (!v[1] || !v[1].length || v[3] === undefined) return;
        vxs[v[0]] = v[0] + '_x'; vals.push([v[0] + '_x', v[1].length * v[2]]); vals.push([v[0], share ? 100 * v[3] : v[3]]); axes[v[0]] = 'y2';
      });
      var types = {};
      Object.keys(vxs).forEach(function (k) { types[k] = 'scatter'; });
      chart('chart-loss', {
        data: { xs: Object.assign(lxs, vxs), columns: curves.concat(vals), axes: axes, types: types },
        point: { r: function (d) { return axes[d.id] ? 6 : 0; }, focus: { expand: { enabled: false } } },
        axis: { x: xn('training samples seen'), y: y0('training loss (smoothed)'),
                y2: { show: vals.length > 0, min: share ? 0 : undefined, max: share ? 100 : undefined,
                      padding: { top: 5, bottom: 0 },
                      label: { text: share ? 'validation accuracy (%), end of run' : (q.metric || 'validation'), position: 'outer-middle' } } }
      });
    } else {
      document.getElementById('chart-loss').textContent = 'The quality guard did not run: no loss curves.';
      document.getElementById('chart-loss').setAttribute('data-rendered', 'none');
    }
  } else {
    document.getElementById('plan-only').style.display = 'none';
    var steps = data.steps;
    var seen = [], total = 0;
    steps.forEach(function (s) { total += s.samples || 0; seen.push(total); });
    var rate = steps.map(function (s) { return s.step_ms > 0 ? s.samples / (s.step_ms / 1000) : 0; });
    var sorted = rate.slice(Math.min(5, Math.floor(rate.length / 5))).sort(function (a, b) { return a - b; });
    var median = sorted.length ? sorted[Math.floor(sorted.length / 2)] : 0;
    var tail = steps.slice(-Math.min(50, steps.length));
    tail = tail.filter(function (s) { return s.loss !== null; });
    var lastLoss = tail.reduce(function (a, s) { return a + s.loss; }, 0) / Math.max(1, tail.length);
    var lastEval = {};
    (data.evals || []).forEach(function (e) { lastEval[e.metric] = e.value; });
    var evalText = Object.keys(lastEval).map(function (m) { return m + ' ' + (/accuracy/.test(m) ? fmt(100 * lastEval[m], 2) + '%' : fmt(lastEval[m], 4)); }).join(', ');
    var c = data.context || {};
    var lines = [(c.model ? c.model + ' on ' + c.data + ': ' : '') + steps.length + ' steps, ' + total + ' samples, median ' + fmt(median) + ' samples/s'];
    var dv = data.divergence;
    if (dv) {  // a diverged run: what happened leads, and what to try
      var big = function (x) { return Math.abs(x) >= 1e6 ? x.toExponential(3) : fmt(x, 4); };
      lines.unshift('Training diverged at step ' + dv.step + ': ' + dv.reason +
                    (dv.last_finite_step >= 0 && dv.last_finite_loss !== null ? '; last finite loss ' + big(dv.last_finite_loss) + ' at step ' + dv.last_finite_step : '') +
                    '. Try a lower --lr or --clip-grad-norm' + (c.precision === 'fp16' ? ', or bf16 instead of fp16.' : '.'));
    }
    var tg = data.target;
    if (tg) {  // --target: the time to it leads
      var goal = tg.metric + (/loss/.test(tg.metric) ? ' ≤ ' : ' ≥ ') + fmt(tg.value, 4);
      lines.push(tg.reached ? 'Target ' + goal + ' reached at step ' + tg.steps + ': ' + tg.samples + ' samples, ' +
                 fmt(tg.train_s, 2) + ' s of training (' + fmt(tg.seen, 4) + ' seen)' : 'Target ' + goal + ' not reached');
    }
    lines.push('Final training loss ' + fmt(lastLoss, 4) + ' (mean of the last ' + tail.length + (tail.length === 1 ? ' step)' : ' steps)') +
               (evalText ? '; last evaluation: ' + evalText : ''));
    headline(lines);
    var ph = ['data_wait_ms', 'host_to_device_ms', 'forward_ms', 'backward_ms', 'optimizer_ms', 'other_ms'];
    var w = Math.max(1, Math.round(steps.length / 100));
    // Warm-up steps (allocation, first kernels) left out: they would set the scale.
    var warm = Math.min(5, Math.floor(steps.length / 5));
    chart('chart-breakdown', {
      data: { x: 'samples', columns: [['samples'].concat(seen.slice(warm))].concat(ph.map(function (p) {
        return [p.replace('_ms', '')].concat(smooth(steps.slice(warm).map(function (s) { return 1000 * (s[p] || 0) / Math.max(1, s.samples || 1); }), w)); })),
        type: 'area', groups: [ph.map(function (p) { return p.replace('_ms', ''); })] },
      point: { show: false }, axis: { x: xn('training samples seen'), y: y0('µs per sample (after ' + warm + ' warm-up steps)') }
    });
    // Evaluations (--eval-every and the end): losses beside the training loss, the other
    // metrics (accuracy) in a chart of their own; each at the samples seen at its step.
    var atStep = {};
    steps.forEach(function (s, i) { atStep[s.step] = seen[i]; });
    var samplesAt = function (step) { return atStep[step] !== undefined ? atStep[step] : total; };
    var lossCols = [['samples'].concat(seen), ['training loss'].concat(smooth(steps.map(function (s) { return s.loss; }), w))];
    var lossXs = { 'training loss': 'samples' }, evalCols = [], evalXs = {}, byMetric = {};
    (data.evals || []).forEach(function (e) { (byMetric[e.metric] = byMetric[e.metric] || []).push(e); });
    Object.keys(byMetric).forEach(function (m) {
      var pts = byMetric[m], isLoss = /loss/.test(m);
      var cols = isLoss ? lossCols : evalCols, xs = isLoss ? lossXs : evalXs;
      cols.push(['x_' + m].concat(pts.map(function (p) { return samplesAt(p.step); })));
      cols.push([m].concat(pts.map(function (p) { return p.value; })));
      xs[m] = 'x_' + m;
    });
    // --target: a line at its value, on the chart that holds its metric.
    var goalLine = function (loss) {
      return tg && /loss/.test(tg.metric) === loss ? { y: { lines: [{ value: tg.value, text: 'target ' + tg.metric + ' ' + fmt(tg.value, 4) }] } } : {};
    };
    chart('chart-loss', {
      data: { xs: lossXs, columns: lossCols }, point: { show: false },
      axis: { x: xn('training samples seen'), y: y0('loss') }, grid: goalLine(true)
    });
    if (evalCols.length) {
      chart('chart-eval', { data: { xs: evalXs, columns: evalCols }, grid: goalLine(false),
                            axis: { x: xn('training samples seen'), y: y0('metric') } });
    } else {
      var ce = document.getElementById('chart-eval');
      ce.textContent = 'No evaluations in this run (train --eval-every N adds them).';
      ce.setAttribute('data-rendered', 'none');
    }
    chart('chart-throughput', {
      data: { x: 'samples', columns: [['samples'].concat(seen), ['samples/s'].concat(smooth(rate, w))] },
      point: { show: false }, axis: { x: xn('training samples seen'), y: y0('samples/s') }
    });
  }
  document.body.setAttribute('data-report', 'done');
})();
)JS";

constexpr const char* kStyle = R"CSS(
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px auto; max-width: 1100px; color: #222; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; } td, th { padding: 3px 10px; border-bottom: 1px solid #eee; text-align: left; vertical-align: top; }
.chart { height: 320px; }
.finding { padding: 6px 10px; margin: 6px 0; border-left: 4px solid #999; background: #fafafa; }
.finding.critical { border-color: #d62728; } .finding.warning { border-color: #ff7f0e; } .finding.info { border-color: #1f77b4; }
.evidence { color: #666; font-size: 12px; } #errors { color: #d62728; white-space: pre; }
#headline { margin: 8px 0 16px; padding: 10px 14px; background: #f4f8f4; border-left: 4px solid #2ca02c; }
#headline .lead { font-size: 18px; font-weight: 600; margin: 0 0 4px; } #headline .sub { margin: 2px 0; }
)CSS";

}  // namespace

ReportAssets load_report_assets() {
  const char* env = std::getenv("SATURATE_JS_DIR");
  const std::string dir = env && *env ? env : "/usr/share/javascript";
  ReportAssets a;
  a.d3_js = read_text(dir + "/d3/d3.min.js", "libjs-d3");
  a.c3_js = read_text(dir + "/c3/c3.min.js", "libjs-c3");
  a.c3_css = read_text(dir + "/c3/c3.min.css", "libjs-c3");
  return a;
}

json read_report_input(const std::string& path) {
  struct stat st {};
  const bool found = ::stat(path.c_str(), &st) == 0;
  if (found && S_ISDIR(st.st_mode)) {
    // A --logdir folder: its steps.jsonl, or rank 0's under data parallel.
    for (const char* name : {"/steps.jsonl", "/rank0/steps.jsonl"}) {
      struct stat f {};
      if (::stat((path + name).c_str(), &f) == 0 && S_ISREG(f.st_mode))
        return read_report_input(path + name);
    }
    SATURATE_CHECK(false, "report: ", path, " is a folder without a steps.jsonl (give a train "
                   "--logdir folder, a steps.jsonl or a plan.json from tune)");
  }
  // The whole file is parsed in memory: a size no run writes is refused before reading it.
  constexpr int64_t kMaxInputBytes = 1LL << 30;
  SATURATE_CHECK(!found || static_cast<int64_t>(st.st_size) <= kMaxInputBytes, "report: ", path,
                 ": ", format_bytes(static_cast<int64_t>(st.st_size)), " is larger than the ",
                 format_bytes(kMaxInputBytes), " a report reads");
  std::ifstream in(path, std::ios::binary);
  SATURATE_CHECK(in.good(), "report: cannot read ", path);
  std::ostringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  const size_t first = s.find_first_not_of(" \t\r\n");
  SATURATE_CHECK(first != std::string::npos, "report: ", path, ": empty file");
  json doc;
  bool whole = true;
  try {
    doc = json::parse(s);
  } catch (const json::exception&) {
    whole = false;  // maybe JSON lines
  }
  json out;
  if (whole && doc.is_object() && doc.contains("config") && doc.contains("trials")) {
    out = plan_input(doc, path);
  } else if (whole && doc.is_object() && doc.value("type", std::string()) != "step") {
    SATURATE_CHECK(false, "report: ", path,
                   ": not a plan (saturate tune --out) or a run's steps.jsonl (--logdir)");
  } else {
    std::istringstream lines(s);
    out = run_input(lines, path);
  }
  out["source"] = path;
  return out;
}

std::string html_report(const json& input, const ReportAssets& assets) {
  const std::string title = input.value("title", std::string("saturate report"));
  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>"
    << html_escape(title) << "</title>\n<style>" << script_safe(assets.c3_css) << kStyle
    << "</style>\n<script>" << script_safe(assets.d3_js) << "</script>\n<script>"
    << script_safe(assets.c3_js) << "</script>\n</head><body>\n"
    << "<h1 id=\"title\"></h1>\n<div id=\"headline\"></div>\n<p>From <code>" << html_escape(input.value("source", std::string()))
    << "</code>. Charts: c3 " << "on d3, inlined; this file needs no network.</p>\n"
    << "<div id=\"errors\"></div>\n"
    << "<div id=\"exec\"><h2>Your program</h2></div>\n"
    << "<div id=\"goodput\"><h2>Batch size by goodput</h2><div id=\"goodput-text\"></div>"
       "<div id=\"chart-goodput\" class=\"chart\"></div></div>\n"
    << "<h2>Findings</h2><div id=\"findings\"></div>\n"
    << "<div id=\"plan-only\"><h2>Stages</h2><table><thead><tr><th>stage</th><th>samples/s "
       "before</th><th>after</th><th></th><th>why</th></tr></thead><tbody id=\"stages\"></tbody>"
       "</table><div id=\"chart-stages\" class=\"chart\"></div>\n"
    << "<h2>Memory vs batch size</h2><div id=\"chart-memory\" class=\"chart\"></div></div>\n"
    << "<h2>Throughput</h2><div id=\"chart-throughput\" class=\"chart\"></div>\n"
    << "<h2>Step breakdown</h2><div id=\"chart-breakdown\" class=\"chart\"></div>\n"
    << "<h2>Loss</h2><div id=\"chart-loss\" class=\"chart\"></div>\n"
    << "<div id=\"run-only\"><h2>Evaluation</h2><div id=\"chart-eval\" class=\"chart\"></div>"
       "</div>\n"
    << "<h2>Context</h2><table id=\"context\"></table>\n"
    << "<script type=\"application/json\" id=\"report-data\">" << script_safe(input.dump())
    << "</script>\n<script>" << kScript << "</script>\n</body></html>\n";
  return h.str();
}

}  // namespace saturate
