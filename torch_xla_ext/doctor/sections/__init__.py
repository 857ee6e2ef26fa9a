"""One module per section of the doctor report, each a function returning (summary, markdown,
data) or raising ``SectionFailed`` with what it found on the model."""
