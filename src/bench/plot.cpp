// The sweep PNG, drawn with cairo; see plot.h.
#include "bench/plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>

#ifdef VLLM_HAVE_CAIRO
#include <cairo.h>
#endif

namespace vllm::bench {

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo)) hi = lo + 1;
  const double raw = (hi - lo) / std::max(target, 1);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag * 10;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0}) {
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  }
  std::vector<double> ticks;
  for (double t = std::floor(lo / step) * step; t < hi + step * 0.999; t += step) {
    ticks.push_back(std::fabs(t) < step * 1e-9 ? 0.0 : t);
  }
  return ticks;
}

#ifndef VLLM_HAVE_CAIRO

bool sweep_plot_available() { return false; }

Status write_sweep_plot(const std::filesystem::path& png, const std::vector<SweepPoint>&,
                        const PlotOptions&) {
  return make_error(ErrorCode::kUnsupported,
                    "--plot {}: this build has no cairo (install libcairo2-dev and rebuild)",
                    png.string());
}

#else

bool sweep_plot_available() { return true; }

namespace {

struct Series {
  std::string name;
  std::vector<double> y;
  double r, g, b;
  bool dashed;
};

struct Panel {
  std::string title;
  std::string y_label;
  std::vector<Series> series;
};

struct Rect {
  double x, y, w, h;
};

std::string tick_text(double v) {
  if (v == 0) return "0";
  if (std::fabs(v) >= 10000) return fmt::format("{:.0f}k", v / 1000);
  if (std::fabs(v) >= 100 || v == std::floor(v)) return fmt::format("{:.0f}", v);
  if (std::fabs(v) >= 1) return fmt::format("{:.1f}", v);
  return fmt::format("{:.2g}", v);
}

void text_at(cairo_t* cr, const std::string& s, double x, double y, double size, bool bold,
             double align_x, double align_y, double angle = 0.0) {
  cairo_select_font_face(cr, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL,
                         bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, size);
  cairo_text_extents_t ext;
  cairo_text_extents(cr, s.c_str(), &ext);
  cairo_save(cr);
  cairo_translate(cr, x, y);
  cairo_rotate(cr, angle);
  cairo_move_to(cr, -ext.x_bearing - ext.width * align_x, -ext.y_bearing - ext.height * align_y);
  cairo_show_text(cr, s.c_str());
  cairo_restore(cr);
}

void draw_panel(cairo_t* cr, const Panel& panel, const std::vector<double>& xs, bool log_x,
                const Rect& area) {
  // Plot box inside the panel area, leaving room for the labels.
  const Rect box{area.x + 78, area.y + 40, area.w - 100, area.h - 100};
  text_at(cr, panel.title, box.x + box.w / 2, area.y + 12, 17, true, 0.5, 0.0);

  double y_max = 0;
  for (const Series& s : panel.series) {
    for (double v : s.y) {
      if (std::isfinite(v)) y_max = std::max(y_max, v);
    }
  }
  if (y_max <= 0) y_max = 1;
  // Headroom above the data for the legend, which sits in the top left corner.
  const std::vector<double> yticks = nice_ticks(0, y_max * 1.4);
  const double y_top = yticks.back();
  auto tx = [&](double x) { return log_x ? std::log2(x) : x; };
  double x_lo = tx(xs.front()), x_hi = tx(xs.back());
  if (x_hi == x_lo) {
    x_lo -= 1;
    x_hi += 1;
  }
  const double pad = (x_hi - x_lo) * 0.06;
  x_lo -= pad;
  x_hi += pad;
  auto px = [&](double x) { return box.x + (tx(x) - x_lo) / (x_hi - x_lo) * box.w; };
  auto py = [&](double y) { return box.y + box.h - y / y_top * box.h; };

  // Grid and y ticks.
  cairo_set_line_width(cr, 1);
  for (double t : yticks) {
    cairo_set_source_rgb(cr, 0.88, 0.88, 0.88);
    cairo_move_to(cr, box.x, py(t));
    cairo_line_to(cr, box.x + box.w, py(t));
    cairo_stroke(cr);
    cairo_set_source_rgb(cr, 0.15, 0.15, 0.15);
    text_at(cr, tick_text(t), box.x - 8, py(t), 12, false, 1.0, 0.5);
  }
  // X ticks: one per concurrency level.
  for (double x : xs) {
    cairo_set_source_rgb(cr, 0.93, 0.93, 0.93);
    cairo_move_to(cr, px(x), box.y);
    cairo_line_to(cr, px(x), box.y + box.h);
    cairo_stroke(cr);
    cairo_set_source_rgb(cr, 0.15, 0.15, 0.15);
    cairo_move_to(cr, px(x), box.y + box.h);
    cairo_line_to(cr, px(x), box.y + box.h + 5);
    cairo_stroke(cr);
    text_at(cr, tick_text(x), px(x), box.y + box.h + 9, 12, false, 0.5, 0.0);
  }
  // Frame and axis labels.
  cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
  cairo_rectangle(cr, box.x, box.y, box.w, box.h);
  cairo_stroke(cr);
  text_at(cr, log_x ? "Max concurrency (log scale)" : "Max concurrency", box.x + box.w / 2,
          box.y + box.h + 30, 13, false, 0.5, 0.0);
  text_at(cr, panel.y_label, area.x + 14, box.y + box.h / 2, 13, false, 0.5, 0.5, -M_PI / 2);

  // Series: lines with round markers.
  for (const Series& s : panel.series) {
    cairo_set_source_rgb(cr, s.r, s.g, s.b);
    cairo_set_line_width(cr, 2.5);
    if (s.dashed) {
      const double dash[] = {7, 4};
      cairo_set_dash(cr, dash, 2, 0);
    }
    for (size_t i = 0; i < xs.size(); ++i) {
      if (i == 0) cairo_move_to(cr, px(xs[i]), py(s.y[i]));
      else cairo_line_to(cr, px(xs[i]), py(s.y[i]));
    }
    cairo_stroke(cr);
    cairo_set_dash(cr, nullptr, 0, 0);
    for (size_t i = 0; i < xs.size(); ++i) {
      cairo_arc(cr, px(xs[i]), py(s.y[i]), 4, 0, 2 * M_PI);
      cairo_fill(cr);
    }
  }
  // Legend, top left inside the box.
  const double lx = box.x + 12, ly = box.y + 12;
  const double lw = 190, lh = 10 + 20.0 * panel.series.size();
  cairo_set_source_rgba(cr, 1, 1, 1, 0.9);
  cairo_rectangle(cr, lx, ly, lw, lh);
  cairo_fill_preserve(cr);
  cairo_set_source_rgb(cr, 0.7, 0.7, 0.7);
  cairo_set_line_width(cr, 1);
  cairo_stroke(cr);
  for (size_t i = 0; i < panel.series.size(); ++i) {
    const Series& s = panel.series[i];
    const double yy = ly + 15 + 20.0 * i;
    cairo_set_source_rgb(cr, s.r, s.g, s.b);
    cairo_set_line_width(cr, 2.5);
    if (s.dashed) {
      const double dash[] = {7, 4};
      cairo_set_dash(cr, dash, 2, 0);
    }
    cairo_move_to(cr, lx + 8, yy);
    cairo_line_to(cr, lx + 36, yy);
    cairo_stroke(cr);
    cairo_set_dash(cr, nullptr, 0, 0);
    cairo_set_source_rgb(cr, 0.1, 0.1, 0.1);
    text_at(cr, s.name, lx + 44, yy, 12, false, 0.0, 0.5);
  }
}

// The highest chosen percentile of a metric: (label, values per point).
std::pair<std::string, std::vector<double>> top_percentile(const std::vector<SweepPoint>& points,
                                                           const MetricSummary BenchmarkMetrics::*m) {
  std::vector<double> ys;
  std::string label;
  for (const SweepPoint& p : points) {
    const MetricSummary& s = p.metrics.*m;
    if (s.percentiles.empty()) {
      ys.push_back(NAN);
      continue;
    }
    const auto& [pct, value] = s.percentiles.back();
    label = pct == std::floor(pct) ? fmt::format("P{}", static_cast<int64_t>(pct)) : fmt::format("P{}", pct);
    ys.push_back(value);
  }
  return {label, ys};
}

}  // namespace

Status write_sweep_plot(const std::filesystem::path& png, const std::vector<SweepPoint>& points,
                        const PlotOptions& options) {
  if (points.empty()) return make_error(ErrorCode::kInvalidArgument, "--plot: no sweep results");
  std::vector<SweepPoint> sorted = points;
  std::sort(sorted.begin(), sorted.end(),
            [](const SweepPoint& a, const SweepPoint& b) { return a.max_concurrency < b.max_concurrency; });
  std::vector<double> xs;
  for (const SweepPoint& p : sorted) xs.push_back(static_cast<double>(p.max_concurrency));
  const bool log_x = xs.front() > 0 && xs.back() / xs.front() >= 8;

  auto values = [&](auto getter) {
    std::vector<double> ys;
    for (const SweepPoint& p : sorted) ys.push_back(getter(p.metrics));
    return ys;
  };
  const auto [ttft_label, ttft_top] = top_percentile(sorted, &BenchmarkMetrics::ttft_ms);
  const auto [tpot_label, tpot_top] = top_percentile(sorted, &BenchmarkMetrics::tpot_ms);
  std::vector<Panel> panels(3);
  panels[0] = {"Time to first token", "TTFT (ms)",
               {{"Mean TTFT", values([](const BenchmarkMetrics& m) { return m.ttft_ms.mean; }), 0.12, 0.47, 0.71, false},
                {"Median TTFT", values([](const BenchmarkMetrics& m) { return m.ttft_ms.median; }), 0.17, 0.63, 0.17, false}}};
  panels[1] = {"Time per output token (excl. 1st)", "TPOT (ms)",
               {{"Mean TPOT", values([](const BenchmarkMetrics& m) { return m.tpot_ms.mean; }), 0.12, 0.47, 0.71, false},
                {"Median TPOT", values([](const BenchmarkMetrics& m) { return m.tpot_ms.median; }), 0.17, 0.63, 0.17, false}}};
  if (!ttft_label.empty()) panels[0].series.push_back({ttft_label + " TTFT", ttft_top, 0.84, 0.15, 0.16, true});
  if (!tpot_label.empty()) panels[1].series.push_back({tpot_label + " TPOT", tpot_top, 0.84, 0.15, 0.16, true});
  panels[2] = {"Throughput", "Tokens per second",
               {{"Output tok/s", values([](const BenchmarkMetrics& m) { return m.output_throughput; }), 0.12, 0.47, 0.71, false},
                {"Total tok/s (in + out)", values([](const BenchmarkMetrics& m) { return m.total_token_throughput; }), 1.0, 0.5, 0.05, true}}};

  std::unique_ptr<cairo_surface_t, decltype(&cairo_surface_destroy)> surface(
      cairo_image_surface_create(CAIRO_FORMAT_ARGB32, options.width, options.height),
      cairo_surface_destroy);
  std::unique_ptr<cairo_t, decltype(&cairo_destroy)> cr(cairo_create(surface.get()), cairo_destroy);
  cairo_set_source_rgb(cr.get(), 1, 1, 1);
  cairo_paint(cr.get());
  cairo_set_source_rgb(cr.get(), 0.05, 0.05, 0.05);
  text_at(cr.get(), options.title.empty() ? "vllm bench serve: concurrency sweep" : options.title,
          options.width / 2.0, 12, 19, true, 0.5, 0.0);
  const double top = 44;
  const double panel_w = options.width / 3.0;
  for (size_t i = 0; i < panels.size(); ++i) {
    draw_panel(cr.get(), panels[i], xs, log_x, Rect{panel_w * i, top, panel_w, options.height - top});
  }
  cairo_surface_flush(surface.get());
  if (cairo_surface_write_to_png(surface.get(), png.c_str()) != CAIRO_STATUS_SUCCESS) {
    return make_error(ErrorCode::kIoError, "--plot {}: cannot write the PNG", png.string());
  }
  return Status::ok();
}

#endif  // VLLM_HAVE_CAIRO

}  // namespace vllm::bench
