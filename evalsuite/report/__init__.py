"""Reports: self-contained HTML, Markdown summary, versioned results.json, JUnit XML."""
