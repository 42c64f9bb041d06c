from perfsift.streams.cli import main

main()
