from mecsim.cli import entry

entry()
