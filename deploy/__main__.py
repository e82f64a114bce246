from deploy.entry import main

main()
