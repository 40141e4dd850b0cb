/* The lab's plots, written as SVG directly: a line chart (throughput over time)
 * and grouped bars (latency percentiles, throughput per workload), then the set
 * of plots a lab produces. SVG needs no plotting program on the machine and no
 * process beyond the lab's own, and any browser shows it. */
#include "lab/lab_private.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#define PLOT_WIDTH 880
#define PLOT_HEIGHT 480
#define PLOT_LEFT 84
#define PLOT_RIGHT 24
#define PLOT_TOP 56
#define PLOT_BOTTOM 72
#define PLOT_FONT "font-family=\"sans-serif\" font-size=\"13\""

static const double plot_inner_width = PLOT_WIDTH - PLOT_LEFT - PLOT_RIGHT;
static const double plot_inner_height = PLOT_HEIGHT - PLOT_TOP - PLOT_BOTTOM;

static void write_escaped(FILE *file, const char *text)
{
    for (; *text != '\0'; text++) {
        switch (*text) {
        case '&': fputs("&amp;", file); break;
        case '<': fputs("&lt;", file); break;
        case '>': fputs("&gt;", file); break;
        case '"': fputs("&quot;", file); break;
        default: fputc(*text, file); break;
        }
    }
}

static void write_text(FILE *file, double x, double y, const char *anchor, const char *extra, const char *text)
{
    fprintf(file, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" " PLOT_FONT "%s%s>", x, y, anchor,
            extra[0] != '\0' ? " " : "", extra);
    write_escaped(file, text);
    fputs("</text>\n", file);
}

/* 1, 2 or 5 times a power of ten, giving about target ticks over range. */
static double nice_step(double range, int target)
{
    if (!(range > 0)) {
        return 1.0;
    }
    double raw = range / target;
    double magnitude = pow(10.0, floor(log10(raw)));
    double normalized = raw / magnitude;
    double step = normalized <= 1.0 ? 1.0 : normalized <= 2.0 ? 2.0 : normalized <= 5.0 ? 5.0 : 10.0;
    return step * magnitude;
}

static void format_tick(double value, char *out, size_t size)
{
    if (fabs(value) >= 1000) {
        lab_grouped(value, out, size);
    } else {
        snprintf(out, size, "%g", value);
    }
}

static FILE *open_svg(const char *path, const char *title, int height, bson_error_t *error)
{
    FILE *file = fopen(path, "w");
    if (file == NULL) {
        tc_error_set(error, TC_ERR_OPERATION_FAILED, "cannot write the plot %s: %s", path, strerror(errno));
        return NULL;
    }
    fprintf(file,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\">\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            PLOT_WIDTH, height, PLOT_WIDTH, height);
    write_text(file, PLOT_WIDTH / 2.0, 28, "middle", "font-weight=\"bold\"", title);
    return file;
}

static bool close_svg(FILE *file, const char *path, bson_error_t *error)
{
    fputs("</svg>\n", file);
    bool ok = !ferror(file);
    if (fclose(file) != 0) {
        ok = false;
    }
    if (!ok) {
        return tc_error_set(error, TC_ERR_OPERATION_FAILED, "cannot write the plot %s", path);
    }
    return true;
}

static void write_y_label(FILE *file, double top, double height, const char *y_label)
{
    char transform[96];
    snprintf(transform, sizeof transform, "transform=\"rotate(-90 18 %.1f)\"", top + height / 2);
    write_text(file, 18, top + height / 2, "middle", transform, y_label);
}

static void write_axis_labels(FILE *file, const char *x_label, const char *y_label)
{
    write_text(file, PLOT_LEFT + plot_inner_width / 2, PLOT_HEIGHT - 16, "middle", "", x_label);
    write_y_label(file, PLOT_TOP, plot_inner_height, y_label);
}

static void write_legend_entry(FILE *file, double top, int index, const char *label, const char *color, bool dashed,
                               bool box)
{
    double x = PLOT_LEFT + 12, y = top + 14 + index * 18;
    if (box) {
        fprintf(file, "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"10\" fill=\"%s\"/>\n", x, y - 9, color);
    } else {
        fprintf(file, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2.5\"%s/>\n",
                x, y - 4, x + 22, y - 4, color, dashed ? " stroke-dasharray=\"6 4\"" : "");
    }
    write_text(file, x + 28, y, "start", "", label);
}

/* The x axis every panel of a chart shares: 1 .. x_right seconds. */
static double lines_x_right(const lab_plot_line_t *lines, size_t line_count, double *out_step)
{
    int x_max = 1;
    for (size_t i = 0; i < line_count; i++) {
        x_max = lines[i].count > x_max ? lines[i].count : x_max;
    }
    *out_step = nice_step((double)x_max, 8);
    return ceil((double)x_max / *out_step) * *out_step;
}

/* One line chart in the band [top, top + height] of the file. */
static void write_line_panel(FILE *file, double top, double height, double x_right, double x_step,
                             const lab_plot_line_t *lines, size_t line_count)
{
    double y_max = 0;
    for (size_t i = 0; i < line_count; i++) {
        for (int j = 0; j < lines[i].count; j++) {
            if (isfinite(lines[i].values[j]) && lines[i].values[j] > y_max) {
                y_max = lines[i].values[j];
            }
        }
    }
    double y_step = nice_step(y_max > 0 ? y_max * 1.05 : 1.0, height > 200 ? 6 : 3);
    double y_top = ceil((y_max > 0 ? y_max * 1.05 : 1.0) / y_step) * y_step;
    char label[32];
    for (double tick = 0; tick <= y_top + y_step / 2; tick += y_step) {
        double y = top + height - tick / y_top * height;
        fprintf(file, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>\n", PLOT_LEFT, y,
                PLOT_LEFT + plot_inner_width, y);
        format_tick(tick, label, sizeof label);
        write_text(file, PLOT_LEFT - 8, y + 4, "end", "", label);
    }
    for (double tick = 0; tick <= x_right + x_step / 2; tick += x_step) {
        double x = PLOT_LEFT + tick / x_right * plot_inner_width;
        fprintf(file, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#f0f0f0\"/>\n", x, top, x,
                top + height);
        format_tick(tick, label, sizeof label);
        write_text(file, x, top + height + 18, "middle", "", label);
    }
    fprintf(file, "<rect x=\"%d\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#888\"/>\n",
            PLOT_LEFT, top, plot_inner_width, height);
    for (size_t i = 0; i < line_count; i++) {
        const lab_plot_line_t *line = &lines[i];
        fprintf(file, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%.1f\"%s points=\"", line->color,
                line->width > 0 ? line->width : 1.5, line->dashed ? " stroke-dasharray=\"6 4\"" : "");
        for (int j = 0; j < line->count; j++) {
            double value = isfinite(line->values[j]) ? line->values[j] : 0.0;
            fprintf(file, "%.1f,%.1f ", PLOT_LEFT + (j + 1) / x_right * plot_inner_width,
                    top + height - value / y_top * height);
        }
        fputs("\"/>\n", file);
        write_legend_entry(file, top, (int)i, line->label, line->color, line->dashed, false);
    }
}

bool lab_plot_lines(const char *path, const char *title, const char *x_label, const char *y_label,
                    const lab_plot_line_t *lines, size_t line_count, bson_error_t *error)
{
    double x_step;
    double x_right = lines_x_right(lines, line_count, &x_step);
    FILE *file = open_svg(path, title, PLOT_HEIGHT, error);
    if (file == NULL) {
        return false;
    }
    write_line_panel(file, PLOT_TOP, plot_inner_height, x_right, x_step, lines, line_count);
    write_axis_labels(file, x_label, y_label);
    return close_svg(file, path, error);
}

#define PANEL_HEIGHT 170
#define PANEL_GAP 40

bool lab_plot_panels(const char *path, const char *title, const char *x_label, const lab_plot_panel_t *panels,
                     size_t panel_count, bson_error_t *error)
{
    double x_step = 1, x_right = 1;
    for (size_t i = 0; i < panel_count; i++) {
        double step;
        double right = lines_x_right(panels[i].lines, panels[i].line_count, &step);
        if (right > x_right) {
            x_right = right;
            x_step = step;
        }
    }
    int height = PLOT_TOP + (int)panel_count * (PANEL_HEIGHT + PANEL_GAP) + PLOT_BOTTOM - PANEL_GAP;
    FILE *file = open_svg(path, title, height, error);
    if (file == NULL) {
        return false;
    }
    for (size_t i = 0; i < panel_count; i++) {
        double top = PLOT_TOP + (double)i * (PANEL_HEIGHT + PANEL_GAP);
        write_line_panel(file, top, PANEL_HEIGHT, x_right, x_step, panels[i].lines, panels[i].line_count);
        write_y_label(file, top, PANEL_HEIGHT, panels[i].y_label);
    }
    write_text(file, PLOT_LEFT + plot_inner_width / 2, height - 16, "middle", "", x_label);
    return close_svg(file, path, error);
}

bool lab_plot_bars(const char *path, const char *title, const char *y_label, bool log_scale,
                   const char *const *categories, size_t category_count, const lab_plot_bars_t *groups,
                   size_t group_count, bson_error_t *error)
{
    double low = INFINITY, high = 0;
    for (size_t g = 0; g < group_count; g++) {
        for (size_t c = 0; c < category_count; c++) {
            double value = groups[g].values[c];
            if (isfinite(value) && value > 0) {
                low = value < low ? value : low;
                high = value > high ? value : high;
            }
        }
    }
    if (!(high > 0)) {
        low = 1, high = 1;
    }
    /* Log scale: whole decades around the data. Linear: from 0 with nice steps. */
    double axis_low = 0, axis_high, step = 0;
    if (log_scale) {
        axis_low = pow(10.0, floor(log10(low)));
        axis_high = pow(10.0, ceil(log10(high)));
        if (axis_high <= axis_low) {
            axis_high = axis_low * 10;
        }
    } else {
        step = nice_step(high * 1.05, 6);
        axis_high = ceil(high * 1.05 / step) * step;
    }
#define PLOT_Y(value)                                                                                   \
    (PLOT_TOP + plot_inner_height -                                                                      \
     (log_scale ? (log10(value) - log10(axis_low)) / (log10(axis_high) - log10(axis_low))               \
                : (value) / axis_high) * plot_inner_height)

    FILE *file = open_svg(path, title, PLOT_HEIGHT, error);
    if (file == NULL) {
        return false;
    }
    char label[32];
    if (log_scale) {
        for (double tick = axis_low; tick <= axis_high * 1.001; tick *= 10) {
            double y = PLOT_Y(tick);
            fprintf(file, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>\n", PLOT_LEFT, y,
                    PLOT_LEFT + plot_inner_width, y);
            format_tick(tick, label, sizeof label);
            write_text(file, PLOT_LEFT - 8, y + 4, "end", "", label);
        }
    } else {
        for (double tick = 0; tick <= axis_high + step / 2; tick += step) {
            double y = PLOT_Y(tick);
            fprintf(file, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>\n", PLOT_LEFT, y,
                    PLOT_LEFT + plot_inner_width, y);
            format_tick(tick, label, sizeof label);
            write_text(file, PLOT_LEFT - 8, y + 4, "end", "", label);
        }
    }
    fprintf(file, "<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#888\"/>\n",
            PLOT_LEFT, PLOT_TOP, plot_inner_width, plot_inner_height);
    double slot = plot_inner_width / (double)(category_count > 0 ? category_count : 1);
    double bar = slot * 0.7 / (double)(group_count > 0 ? group_count : 1);
    double base = PLOT_TOP + plot_inner_height;
    for (size_t c = 0; c < category_count; c++) {
        double left = PLOT_LEFT + slot * (double)c + slot * 0.15;
        for (size_t g = 0; g < group_count; g++) {
            double value = groups[g].values[c];
            if (!isfinite(value) || value <= 0) {
                continue;
            }
            double clamped = value < axis_low ? axis_low : value;
            double top = PLOT_Y(clamped);
            fprintf(file, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"><title>",
                    left + bar * (double)g, top, bar * 0.92, base - top, groups[g].color);
            write_escaped(file, groups[g].label);
            fputc(' ', file);
            write_escaped(file, categories[c]);
            fprintf(file, ": %.3g</title></rect>\n", value);
        }
        write_text(file, PLOT_LEFT + slot * ((double)c + 0.5), base + 18, "middle", "", categories[c]);
    }
    for (size_t g = 0; g < group_count; g++) {
        write_legend_entry(file, PLOT_TOP, (int)g, groups[g].label, groups[g].color, false, true);
    }
#undef PLOT_Y
    write_axis_labels(file, "", y_label);
    return close_svg(file, path, error);
}

/* --- the lab's plots ------------------------------------------------------------------ */

#define COLOR_DIRECT "#c0392b"
#define COLOR_TIERED "#2471a3"

static bool plot_empty_start(const lab_t *lab, const char *path, bson_error_t *error)
{
    const lab_run_t *run = &lab->empty_start;
    const lab_run_t *reference = NULL;
    for (int i = 0; i < LAB_WORKLOAD_COUNT; i++) {
        if (strcmp(lab->workloads[i], "store") == 0 && lab->direct[i].ok) {
            reference = &lab->direct[i];
        }
    }
    int count = run->second_count;
    double *average = bson_malloc0(((size_t)count + 1) * sizeof *average);
    double *direct = bson_malloc0(((size_t)count + 1) * sizeof *direct);
    double window_sum = 0;
    for (int second = 0; second < count; second++) {
        window_sum += run->ops_series[second];
        if (second >= 10) {
            window_sum -= run->ops_series[second - 10];
        }
        average[second] = window_sum / (second + 1 < 10 ? second + 1 : 10);
        direct[second] = reference != NULL ? reference->ops_per_second : 0;
    }
    char direct_label[96];
    snprintf(direct_label, sizeof direct_label, "direct to the archive, store average (%.0f ops/s)",
             reference != NULL ? reference->ops_per_second : 0.0);
    lab_plot_line_t lines[] = {
        {"through the proxy, per second", "#aed6f1", run->ops_series, count, 1.0, false},
        {"through the proxy, 10-second average", COLOR_TIERED, average, count, 2.5, false},
        {direct_label, COLOR_DIRECT, direct, count, 2.0, true},
    };
    bool ok = lab_plot_lines(path, "store workload from an empty fast tier: throughput over time", "seconds",
                             "operations per second", lines, reference != NULL ? 3 : 2, error);
    bson_free(average);
    bson_free(direct);
    return ok;
}

static bool plot_latency(const lab_t *lab, int index, const char *path, bson_error_t *error)
{
    static const char *const categories[] = {"read p50", "read p95", "read p99", "read p99.9",
                                             "update p50", "update p95", "update p99", "update p99.9"};
    const lab_run_t *runs[2] = {&lab->direct[index], &lab->tiered[index]};
    double values[2][8];
    for (int r = 0; r < 2; r++) {
        const lab_run_t *run = runs[r];
        double figures[8] = {run->read.p50_ms, run->read.p95_ms, run->read.p99_ms, run->read.p999_ms,
                             run->update.p50_ms, run->update.p95_ms, run->update.p99_ms, run->update.p999_ms};
        for (int c = 0; c < 8; c++) {
            values[r][c] = run->ok ? figures[c] : NAN;
        }
    }
    lab_plot_bars_t groups[] = {{"direct to the archive", COLOR_DIRECT, values[0]},
                                {"through the proxy (tiered)", COLOR_TIERED, values[1]}};
    char title[128];
    snprintf(title, sizeof title, "%s workload: latency percentiles, direct vs tiered", lab->workloads[index]);
    return lab_plot_bars(path, title, "milliseconds (log scale)", true, categories, 8, groups, 2, error);
}

static bool plot_throughput(const lab_t *lab, const char *path, bson_error_t *error)
{
    double direct[LAB_WORKLOAD_COUNT], tiered[LAB_WORKLOAD_COUNT];
    for (int i = 0; i < LAB_WORKLOAD_COUNT; i++) {
        direct[i] = lab->direct[i].ok ? lab->direct[i].ops_per_second : NAN;
        tiered[i] = lab->tiered[i].ok ? lab->tiered[i].ops_per_second : NAN;
    }
    lab_plot_bars_t groups[] = {{"direct to the archive", COLOR_DIRECT, direct},
                                {"through the proxy (tiered)", COLOR_TIERED, tiered}};
    return lab_plot_bars(path, "throughput per workload, direct vs tiered", "operations per second", false,
                         lab->workloads, LAB_WORKLOAD_COUNT, groups, 2, error);
}

bool lab_report_plots(const lab_t *lab, FILE *stream, bson_error_t *error)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/throughput.svg", lab->settings.output_dir);
    if (!plot_throughput(lab, path, error)) {
        return false;
    }
    fprintf(stream, "  %s\n", path);
    for (int i = 0; i < LAB_WORKLOAD_COUNT; i++) {
        snprintf(path, sizeof path, "%s/latency-%s.svg", lab->settings.output_dir, lab->workloads[i]);
        if (!plot_latency(lab, i, path, error)) {
            return false;
        }
        fprintf(stream, "  %s\n", path);
    }
    for (int i = 0; i < LAB_WORKLOAD_COUNT; i++) {
        if (!lab->tiered[i].ok) {
            continue;
        }
        char title[128];
        snprintf(title, sizeof title, "%s tiered: each second of the run", lab->workloads[i]);
        snprintf(path, sizeof path, "%s/timeline-%s-tiered.svg", lab->settings.output_dir, lab->workloads[i]);
        if (!lab_timeline_plot(&lab->tiered[i], title, path, error)) {
            return false;
        }
        fprintf(stream, "  %s\n", path);
    }
    if (lab->fixed_tiered.ok) {
        snprintf(path, sizeof path, "%s/timeline-store-fixed-tiered.svg", lab->settings.output_dir);
        if (!lab_timeline_plot(&lab->fixed_tiered, "store tiered at a fixed offered load: each second of the run",
                               path, error)) {
            return false;
        }
        fprintf(stream, "  %s\n", path);
    }
    if (lab->empty_start.ok) {
        snprintf(path, sizeof path, "%s/empty-start.svg", lab->settings.output_dir);
        if (!plot_empty_start(lab, path, error)) {
            return false;
        }
        fprintf(stream, "  %s\n", path);
    }
    return true;
}
