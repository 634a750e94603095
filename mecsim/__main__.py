from mecsim.commands.cli import entry

entry()
