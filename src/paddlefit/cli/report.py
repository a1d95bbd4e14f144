"""``paddlefit report``: one self-contained HTML page for a run directory (plots, predicted vs measured,
checkpoints and resumes, the job spec)."""

from __future__ import annotations

from paddlefit import options
from paddlefit.cli.common import err, out, shown
from paddlefit.cli.params import Args, command
from paddlefit.jsondoc import to_json
from paddlefit.rundir.files import report_file


@command(options.RUN_DIR_ARG_REPORT, options.OUT_REPORT, options.JSON_REPORT)
def report_command(args: Args) -> None:
    """Write one self-contained HTML report of a run: loss and eval by step, samples/s and data wait (resumes
    marked), peak memory (GPU), the profiled step-time breakdown, predicted vs measured, summary, checkpoints,
    resumes and the job spec. No network: plots are inline SVG, no scripts, fonts or styles are fetched.

    Examples:
      paddlefit report runs/digits                       # writes runs/digits/report.html
      paddlefit report runs/digits --out digits.html
      paddlefit report runs/digits --json                # {"out", "plots", "status", "resumes"}

    After the path, a line per resume: the time down, the steps lost and run again, and their compute time.
    """
    from paddlefit.fileio import atomic_write_text, check_output_path, refuse_run_target
    from paddlefit.report.html import build_report, plot_ids, render_html
    from paddlefit.report.reading import check_run_dir
    from paddlefit.report.resumes import resume_line
    from paddlefit.textsafe import name_safe

    check_run_dir(args.run_dir)
    target = args.out_file if args.out_file is not None else report_file(args.run_dir)
    refuse_run_target(target, args.run_dir, "--out", report_file(args.run_dir), file_suffix=".html")
    check_output_path(target, "--out", ours="<title>paddlefit report")
    with err.status("writing report..."):
        data = build_report(args.run_dir)
        page = render_html(data)
        path = atomic_write_text(target, page, option="--out")
    if args.json_out:
        print(
            to_json(
                {
                    "out": str(path),
                    "plots": plot_ids(page),
                    "status": data.status,
                    "resumes": [resume_line(r) for r in data.resumes],
                }
            )
        )
        return
    out.print(shown(name_safe(path)), highlight=False, soft_wrap=True)  # one line, to copy whole
    for r in data.resumes:
        out.print(shown(resume_line(r)), highlight=False)
