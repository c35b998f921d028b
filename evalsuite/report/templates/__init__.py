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
td.l { white-space: normal; }  /* names and slices wrap (after , + ;): tables fit a 1300-px window */
td.reason { white-space: normal; min-width: 14em; }
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
h2.first { margin-top: 0.6em; } h3 { margin: 1em 0 0.3em; font-size: 1.05em; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(300px, 1fr)); gap: 0.8em; margin: 0.5em 0; }
.card { background: white; color: #1c1f24; border: 1px solid #d0d4da; border-top: 6px solid #90a4ae;
        border-radius: 6px; padding: 0.5em 0.9em 0.6em; }
.card.v-PASS { border-top-color: #2e7d32; background: #f6fbf6; color: #1c1f24; }
.card.v-FAIL { border-top-color: #c62828; background: #fdf6f6; color: #1c1f24; }
.card.v-INCONCLUSIVE { border-top-color: #ef8f00; background: #fffaf0; color: #1c1f24; }
.card-head { display: flex; justify-content: space-between; align-items: flex-start; gap: 0.5em; }
.card .name { font-size: 1.15em; font-weight: 700; font-family: ui-monospace, monospace; min-width: 0;
              overflow-wrap: anywhere; }
.card .verdict { font-weight: 700; padding: 0.1em 0.6em; border-radius: 3px; color: white; background: #607d8b;
                 flex: none; white-space: nowrap; }
.reasons .lead { color: #555; font-size: 0.9em; font-style: italic; }
.card.v-PASS .verdict { background: #2e7d32; } .card.v-FAIL .verdict { background: #c62828; }
.card.v-INCONCLUSIVE .verdict { background: #ef8f00; }
.card .counts { color: #666; font-size: 0.8em; }
.reasons { margin: 0.35em 0; padding-left: 1.1em; font-size: 0.84em; } .reasons li { margin: 0.15em 0; }
li.r-FAIL b { color: #b71c1c; } li.r-INCONCLUSIVE b { color: #8a5300; } li.r-PASS { color: #1b5e20; }
.more { color: #8a5300; font-weight: 600; }
dl.gains { display: grid; grid-template-columns: max-content 1fr; gap: 0.1em 0.7em; font-size: 0.85em;
           margin: 0.4em 0 0; border-top: 1px solid #e3e6ea; padding-top: 0.35em; }
dl.gains dt { color: #555; } dl.gains dd { margin: 0; }
.rel { color: #555; } .save { color: #1b5e20; font-weight: 600; } .slow { color: #b71c1c; } .fast { color: #1b5e20; }
table.dgrid th { text-align: center; } table.dgrid th.l { text-align: left; font-family: ui-monospace, monospace; }
table.dgrid th.l { overflow-wrap: anywhere; min-width: 8em; }
table.dgrid td.cell { text-align: center; padding: 0.3em 0.5em; }
table.dgrid .d { font-family: ui-monospace, monospace; }
table.dgrid .n { font-size: 0.82em; white-space: normal; overflow-wrap: anywhere; }
table.dgrid td.cell { white-space: normal; min-width: 8em; } table.dgrid .d span { white-space: nowrap; }  /* Δ, then its CI */
details.more-slices { margin: 0.4em 0; }
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
