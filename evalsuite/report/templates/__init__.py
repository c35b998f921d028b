"""Inline page skeleton, CSS and script for the self-contained HTML report (``string.Template``; no network)."""
from string import Template

#: Content-Security-Policy: nothing may load from anywhere but inline styles/scripts and data: images.
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"

PAGE = Template("""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="$csp">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>$title</title>
<style>
$css
</style>
</head>
<body>
$body
<script>
$script
</script>
</body>
</html>
""")

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0 auto; padding: 1em 2em;
       max-width: 1400px; color: #1c1f24; background: #fafafa; }
h1 { font-size: 1.5em; margin-bottom: 0.2em; } h2 { margin-top: 1.8em; border-bottom: 1px solid #ccc; }
.meta { color: #555; font-size: 0.9em; } .meta code { background: #eee; padding: 0 0.3em; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.88em; background: white; }
th, td { border: 1px solid #d0d4da; padding: 0.25em 0.6em; text-align: right; vertical-align: top; }
th { background: #eef1f5; } td { white-space: nowrap; } td.l, th.l { text-align: left; }
td.reason { white-space: normal; min-width: 20em; }
tr.slice td { color: #555; font-size: 0.95em; } tr.slice td.first { padding-left: 1.6em; }
.v { font-weight: 600; text-align: center; border-radius: 3px; }
.v-PASS { background: #d7f0da; color: #1b5e20; } .v-FAIL { background: #fbd5d5; color: #b71c1c; }
.v-INCONCLUSIVE { background: #ffe8b8; color: #8a5300; } .v-none { color: #777; }
.badge { display: inline-block; padding: 0.2em 0.8em; border-radius: 4px; font-size: 1.2em; }
.neg { color: #b71c1c; } .pos { color: #1b5e20; }
img.plot { max-width: 100%; border: 1px solid #ddd; background: white; margin: 0.4em 0; }
.grid { display: flex; flex-wrap: wrap; gap: 1em; }
.controls { display: flex; gap: 1em; flex-wrap: wrap; align-items: center; margin: 0.5em 0; }
.flip { background: white; border: 1px solid #d0d4da; border-radius: 4px; margin: 0.6em 0; padding: 0.5em 0.8em; }
.flip.hidden { display: none; }
.flip header { font-size: 0.9em; margin-bottom: 0.3em; } .dir-rw { color: #b71c1c; } .dir-wr { color: #1b5e20; } .flip header b { margin-right: 0.6em; }
.pair { display: grid; grid-template-columns: 1fr 1fr; gap: 0.8em; }
.pair h4 { margin: 0.2em 0; font-size: 0.85em; color: #444; }
pre { white-space: pre-wrap; word-break: break-word; background: #f4f6f8; padding: 0.5em; margin: 0;
      max-height: 22em; overflow: auto; font-size: 0.85em; }
details summary { cursor: pointer; color: #334; font-size: 0.88em; }
.note { color: #666; font-size: 0.85em; }
"""

SCRIPT = """
(function () {
  var cards = Array.prototype.slice.call(document.querySelectorAll('.flip'));
  var fv = document.getElementById('f-variant'), ft = document.getElementById('f-task');
  var fd = document.getElementById('f-dir'), fq = document.getElementById('f-text');
  var count = document.getElementById('f-count');
  if (!fv || !ft || !fd || !fq || !count) { return; }
  function apply() {
    var q = fq.value.toLowerCase(), shown = 0;
    cards.forEach(function (c) {
      var ok = (!fv.value || c.getAttribute('data-variant') === fv.value) &&
               (!ft.value || c.getAttribute('data-task') === ft.value) &&
               (!fd.value || c.getAttribute('data-dir') === fd.value) &&
               (!q || c.textContent.toLowerCase().indexOf(q) >= 0);
      c.classList.toggle('hidden', !ok);
      if (ok) { shown += 1; }
    });
    count.textContent = 'showing ' + shown + ' of ' + cards.length;
  }
  [fv, ft, fd].forEach(function (el) { el.addEventListener('change', apply); });
  fq.addEventListener('input', apply);
  apply();
})();
"""
