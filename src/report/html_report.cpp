// SPDX-License-Identifier: Apache-2.0
#include "saturate/report/html_report.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "saturate/core/error.h"
#include "saturate/core/json.h"
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
    in["trials"].push_back({{"batch_size", t["config"].value("batch_size", 0)},
                            {"precision", t["config"].value("precision", std::string("fp32"))},
                            {"stage", t.value("stage", std::string())},
                            {"purpose", t.value("purpose", std::string())},
                            {"fits", t.value("outcome", std::string("fits")) == "fits"},
                            {"samples_per_s", t.value("samples_per_s", 0.0)},
                            {"peak_memory_bytes", t.value("peak_memory_bytes", 0)}});
  }
  in["chosen"] = plan["config"];
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

// A run's steps.jsonl: per-step phases, loss and samples/s over the run.
json run_input(std::istream& lines, const std::string& path) {
  json in;
  in["kind"] = "run";
  in["title"] = "saturate run: " + path;
  json steps = json::array();
  json evals = json::array();
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
    if (j.value("type", std::string()) == "eval") {
      // Validation (or test) metrics every --eval-every steps and at the end.
      for (const char* key : {"step", "value"})
        SATURATE_CHECK(j.contains(key) && j[key].is_number(), "report: ", path, ": line ", n,
                       ": an evaluation record needs a number '", key, "'");
      SATURATE_CHECK(j.contains("metric") && j["metric"].is_string(), "report: ", path,
                     ": line ", n, ": an evaluation record needs a 'metric' name");
      evals.push_back({{"step", j["step"]}, {"metric", j["metric"]}, {"value", j["value"]}});
      continue;
    }
    if (j.value("type", std::string()) != "step") continue;
    for (const char* key : {"step", "step_ms", "loss"})
      SATURATE_CHECK(j.contains(key) && j[key].is_number(), "report: ", path, ": line ", n,
                     ": a step record needs a number '", key, "'");
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
    r.loss = j.value("loss", 0.0);
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
  in["context"] = json::object();
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
    gt.appendChild(el('p', 'Gradient noise scale ' + fmt(n.phi, 0) + ' (95%: ' + fmt(n.low, 0) + '–' +
                   (n.high === null ? '∞' : fmt(n.high, 0)) + ', ' + n.kind + ', ' + n.steps +
                   ' steps of ' + n.b_small + ' vs ' + n.b_big + ' samples). ' + g.why));
    // What the quality guard trained along the curve: predicted against measured efficiency.
    (g.guard_branches || []).forEach(function (b) {
      var measured = b.diverged ? 'diverged' : b.measured_efficiency === null ? 'not measured' :
          fmt(b.measured_efficiency, 2);
      var then = b.phi_after === null ? '' : '; φ then credited ' + fmt(b.phi_after, 0);
      gt.appendChild(el('p', 'Guard: batch ' + b.batch_size + (b.searched_up ? ' (up the curve)' : '') +
          ', ' + b.samples + ' samples at equal time: ' + (b.accepted ? 'accepted' : 'rejected') +
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
    }
  } else if (data.gns_text) {
    gt.appendChild(el('p', 'Gradient noise scale measured in the steps: ' + data.gns_text + '.'));
    document.getElementById('chart-goodput').setAttribute('data-rendered', 'none');
  } else {
    gp.style.display = 'none';
  }

  if (data.kind === 'plan') {
    document.getElementById('run-only').style.display = 'none';
    var st = document.getElementById('stages');
    data.stages.forEach(function (s) {
      var tr = el('tr');
      [s.name, fmt(s.before_samples_per_s), fmt(s.after_samples_per_s), s.changed ? 'changed' : '', s.why].forEach(function (c) { tr.appendChild(el('td', c)); });
      st.appendChild(tr);
    });
    chart('chart-stages', {
      data: { x: 'stage', columns: [['stage'].concat(data.stages.map(function (s) { return s.name; })),
                                    ['samples/s after'].concat(data.stages.map(function (s) { return s.after_samples_per_s; }))], type: 'bar' },
      axis: { x: { type: 'category' }, y: { label: 'samples/s' } }, legend: { show: false }
    });
    // Throughput and memory against batch size, per precision; OOMs at the limit line.
    var chosen = data.chosen.batch_size, limit = data.memory_limit_bytes || 0;
    var precisions = {};
    data.trials.forEach(function (t) { precisions[t.precision] = true; });
    var xs = {}, cols = [], memxs = {}, memcols = [];
    Object.keys(precisions).forEach(function (p) {
      var fit = data.trials.filter(function (t) { return t.precision === p && t.fits && t.samples_per_s > 0; });
      fit.sort(function (a, b) { return a.batch_size - b.batch_size; });
      if (fit.length) {
        xs[p] = p + '_x'; cols.push([p + '_x'].concat(fit.map(function (t) { return t.batch_size; })));
        cols.push([p].concat(fit.map(function (t) { return t.samples_per_s; })));
      }
      var mem = data.trials.filter(function (t) { return t.precision === p && t.fits && t.peak_memory_bytes > 0; });
      mem.sort(function (a, b) { return a.batch_size - b.batch_size; });
      if (mem.length) {
        memxs[p + ' peak MiB'] = p + '_mx'; memcols.push([p + '_mx'].concat(mem.map(function (t) { return t.batch_size; })));
        memcols.push([p + ' peak MiB'].concat(mem.map(function (t) { return +mib(t.peak_memory_bytes); })));
      }
    });
    var ooms = data.trials.filter(function (t) { return !t.fits; });
    if (ooms.length) {
      memxs['OOM'] = 'oom_x';
      memcols.push(['oom_x'].concat(ooms.map(function (t) { return t.batch_size; })));
      memcols.push(['OOM'].concat(ooms.map(function () { return limit ? +mib(limit) : 0; })));
    }
    chart('chart-throughput', {
      data: { xs: xs, columns: cols, type: 'scatter' },
      axis: { x: { label: 'batch size', tick: { fit: false } }, y: { label: 'samples/s' } },
      grid: { x: { lines: [{ value: chosen, text: 'chosen ' + chosen }] } }
    });
    var memspec = {
      data: { xs: memxs, columns: memcols, type: 'scatter', colors: { 'OOM': '#d62728' } },
      axis: { x: { label: 'batch size', tick: { fit: false } }, y: { label: 'peak memory (MiB)' } },
      grid: { x: { lines: [{ value: chosen, text: 'chosen ' + chosen }] }, y: { lines: [] } }
    };
    if (limit) memspec.grid.y.lines.push({ value: +mib(limit), text: 'limit ' + mib(limit) + ' MiB' });
    chart('chart-memory', memspec);
    var phases = ['data_wait', 'host_to_device', 'forward', 'backward', 'optimizer', 'other'];
    chart('chart-breakdown', {
      data: { x: 'run', columns: [['run', 'baseline', 'tuned']].concat(phases.map(function (p) {
        return [p, (data.baseline.phases_ms || {})[p] || 0, (data.tuned.phases_ms || {})[p] || 0]; })),
        type: 'bar', groups: [phases] },
      axis: { x: { type: 'category' }, y: { label: 'ms per step' } }
    });
    var q = data.quality || {};
    var loss = [];
    if (q.baseline_losses && q.baseline_losses.length) loss.push(['baseline'].concat(q.baseline_losses));
    if (q.tuned_losses && q.tuned_losses.length) loss.push(['tuned'].concat(q.tuned_losses));
    if (loss.length) {
      chart('chart-loss', { data: { columns: loss }, point: { show: false },
                            axis: { x: { label: 'step of the quality run' }, y: { label: 'training loss' } } });
    } else {
      document.getElementById('chart-loss').textContent = 'The quality guard did not run: no loss curves.';
      document.getElementById('chart-loss').setAttribute('data-rendered', 'none');
    }
  } else {
    document.getElementById('plan-only').style.display = 'none';
    var steps = data.steps;
    var ph = ['data_wait_ms', 'host_to_device_ms', 'forward_ms', 'backward_ms', 'optimizer_ms', 'other_ms'];
    chart('chart-breakdown', {
      data: { x: 'step', columns: [['step'].concat(steps.map(function (s) { return s.step; }))].concat(
        ph.map(function (p) { return [p].concat(steps.map(function (s) { return s[p] || 0; })); })),
        type: 'area', groups: [ph] },
      point: { show: false }, axis: { y: { label: 'ms per step' } }
    });
    // Evaluations (--eval-every and the end): losses beside the training loss, the other
    // metrics (accuracy) in a chart of their own; each metric on its own steps.
    var lossCols = [['step'].concat(steps.map(function (s) { return s.step; })),
                    ['loss'].concat(steps.map(function (s) { return s.loss; }))];
    var lossXs = { loss: 'step' }, evalCols = [], evalXs = {}, byMetric = {};
    (data.evals || []).forEach(function (e) { (byMetric[e.metric] = byMetric[e.metric] || []).push(e); });
    Object.keys(byMetric).forEach(function (m) {
      var pts = byMetric[m], isLoss = /loss/.test(m);
      var cols = isLoss ? lossCols : evalCols, xs = isLoss ? lossXs : evalXs;
      cols.push(['step_' + m].concat(pts.map(function (p) { return p.step; })));
      cols.push([m].concat(pts.map(function (p) { return p.value; })));
      xs[m] = 'step_' + m;
    });
    chart('chart-loss', {
      data: { xs: lossXs, columns: lossCols }, point: { show: false },
      axis: { x: { label: 'step' }, y: { label: 'loss' } }
    });
    if (evalCols.length) {
      chart('chart-eval', { data: { xs: evalXs, columns: evalCols },
                            axis: { x: { label: 'step' }, y: { label: 'metric' } } });
    } else {
      var ce = document.getElementById('chart-eval');
      ce.textContent = 'No evaluations in this run (train --eval-every N adds them).';
      ce.setAttribute('data-rendered', 'none');
    }
    chart('chart-throughput', {
      data: { x: 'step', columns: [['step'].concat(steps.map(function (s) { return s.step; })),
        ['samples/s'].concat(steps.map(function (s) { return s.step_ms > 0 ? s.samples / (s.step_ms / 1000) : 0; }))] },
      point: { show: false }, axis: { y: { label: 'samples/s' } }
    });
  }
  document.body.setAttribute('data-report', 'done');
})();
)JS";

constexpr const char* kStyle = R"CSS(
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px auto; max-width: 1100px; color: #222; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; } td, th { padding: 3px 10px; border-bottom: 1px solid #eee; text-align: left; vertical-align: top; }
.chart { height: 320px; } .grid2 { display: grid; grid-template-columns: 1fr 1fr; gap: 16px; }
.finding { padding: 6px 10px; margin: 6px 0; border-left: 4px solid #999; background: #fafafa; }
.finding.critical { border-color: #d62728; } .finding.warning { border-color: #ff7f0e; } .finding.info { border-color: #1f77b4; }
.evidence { color: #666; font-size: 12px; } #errors { color: #d62728; white-space: pre; }
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
    << "<h1 id=\"title\"></h1>\n<p>From <code>" << html_escape(input.value("source", std::string()))
    << "</code>. Charts: c3 " << "on d3, inlined; this file needs no network.</p>\n"
    << "<div id=\"errors\"></div>\n"
    << "<div id=\"exec\"><h2>Your program</h2></div>\n"
    << "<div id=\"goodput\"><h2>Batch size by goodput</h2><div id=\"goodput-text\"></div>"
       "<div id=\"chart-goodput\" class=\"chart\"></div></div>\n"
    << "<h2>Findings</h2><div id=\"findings\"></div>\n"
    << "<div id=\"plan-only\"><h2>Stages</h2><table><thead><tr><th>stage</th><th>samples/s "
       "before</th><th>after</th><th></th><th>why</th></tr></thead><tbody id=\"stages\"></tbody>"
       "</table><div id=\"chart-stages\" class=\"chart\"></div>\n"
    << "<div class=\"grid2\"><div><h2>Memory vs batch size</h2><div id=\"chart-memory\" "
       "class=\"chart\"></div></div></div></div>\n"
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
